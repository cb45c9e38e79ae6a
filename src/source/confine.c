/* Nothing outside the source: HDF5 set up so that a mount reads its one file
 * and nothing else, and the checks that name what a file points at outside
 * itself. HDF5 can reach another file in these ways, each closed here:
 *
 *  - external links: the library's class is replaced, once, by one whose
 *    traversal refuses, so no path (ours, or one HDF5 follows by itself:
 *    a soft link's target, an object reference) can cross one; its query
 *    still gives the link's value, so a reader can say where it pointed;
 *    user-defined link classes are never registered, so never followed;
 *  - external storage and virtual datasets: refused by zm__h5_dataset_check
 *    right after the dataset is opened, before anything else is asked of
 *    it. HDF5 opens a VDS's source files when asked its extent or values
 *    (H5Dget_space refreshes an unlimited mapping's extent, in either VDS
 *    view), never when it opens the dataset or gives its creation list;
 *    external storage files are opened only by H5Dread;
 *  - the file driver: sec2, given explicitly, on the descriptor the source
 *    opened (/proc/self/fd/N), so HDF5 reads the inode we checked; sec2
 *    refuses family and multi files rather than open their members;
 *  - filter plugins (code): loaded only from the system's plugin directory
 *    (ZM_HDF5_PLUGIN_DIR), whatever HDF5_PLUGIN_PATH says.
 *
 * Then HDF5_EXT_PREFIX, HDF5_VDS_PREFIX and HDF5_EXTFILE_PREFIX (where HDF5
 * looks for the files those name) have nothing left to act on. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/source_internal.h"

#ifndef ZM_HDF5_PLUGIN_DIR
#define ZM_HDF5_PLUGIN_DIR "/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins"
#endif

/* Soft links followed in one check: HDF5's own limit on a traversal
 * (H5L_NUM_LINKS). Past it HDF5 refuses the path itself. */
#define SOFT_LINKS_MAX 16

static hid_t refuse_traversal(const char *name, hid_t group, const void *value, size_t size,
                              hid_t lapl, hid_t dxpl)
{
    (void)name, (void)group, (void)value, (void)size, (void)lapl, (void)dxpl;
    return H5I_INVALID_HID;
}

/* The link's value as stored (version and flags byte, file name, object
 * path), which H5Lunpack_elink_val reads. */
static ssize_t link_value(const char *name, const void *value, size_t size, void *buffer,
                          size_t buffer_size)
{
    (void)name;
    if (buffer != NULL && buffer_size > 0)
        memcpy(buffer, value, size < buffer_size ? size : buffer_size);
    return (ssize_t)size;
}

static const H5L_class_t unfollowed_external = {
    .version = H5L_LINK_CLASS_T_VERS,
    .id = H5L_TYPE_EXTERNAL,
    .comment = "external link, never followed (zarrmount)",
    .trav_func = refuse_traversal,
    .query_func = link_value,
};

const char *zm__h5_plugin_directory(void)
{
    return ZM_HDF5_PLUGIN_DIR;
}

/* The plugin path: the system directory alone. */
static void pin_plugin_path(void)
{
    unsigned count = 0;
    if (H5PLsize(&count) < 0 || count == 0) {
        H5PLappend(ZM_HDF5_PLUGIN_DIR);
    } else {
        H5PLreplace(ZM_HDF5_PLUGIN_DIR, 0);
        while (H5PLsize(&count) >= 0 && count > 1)
            if (H5PLremove(count - 1) < 0)
                break;
    }
    /* Filters only (HDF5 1.10 has no other kind); HDF5_PLUGIN_PRELOAD=::
     * still turns them off, which loads nothing. */
    H5PLset_loading_state(H5PL_FILTER_PLUGIN);
}

void zm__h5_confine(void)
{
    H5Lunregister(H5L_TYPE_EXTERNAL);
    H5Lregister(&unfollowed_external);
    pin_plugin_path();
}

hid_t zm__h5_file_access(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0 && H5Pset_fapl_sec2(fapl) < 0) {
        H5Pclose(fapl);
        return H5I_INVALID_HID;
    }
    return fapl;
}

/* Copies text into out, control bytes as '?': names come from the file and
 * go into log lines. */
static void shown(char *out, size_t size, const char *text)
{
    size_t n = 0;
    for (; text[n] != '\0' && n + 1 < size; n++)
        out[n] = (unsigned char)text[n] < 0x20 || text[n] == 0x7f ? '?' : text[n];
    out[n] = '\0';
}

/* Why the link named `name` in group `at` (shown as `where`; info: its
 * H5Lget_info) leads outside the file, in why; 0 if it does not (a hard or
 * soft link). last: the path checked ends with it (the reason then names
 * no path: the caller's line does). */
static int link_outside(hid_t at, const char *name, const H5L_info_t *info, const char *where,
                        int last, char *why, size_t size)
{
    if (info->type == H5L_TYPE_EXTERNAL) {
        size_t length = info->u.val_size;
        char *value = length > 0 ? malloc(length) : NULL;
        const char *file = NULL, *object = NULL;
        unsigned flags = 0;
        if (value != NULL && (H5Lget_val(at, name, value, length, H5P_DEFAULT) < 0 ||
                              H5Lunpack_elink_val(value, length, &flags, &file, &object) < 0))
            file = object = NULL;
        char file_text[256], object_text[256];
        shown(file_text, sizeof file_text, file ? file : "?");
        shown(object_text, sizeof object_text, object ? object : "?");
        if (last)
            snprintf(why, size, "an external link to %s:%s is not followed", file_text,
                     object_text);
        else
            snprintf(why, size, "%s is an external link to %s:%s, not followed", where, file_text,
                     object_text);
        free(value);
        return 1;
    }
    if (info->type != H5L_TYPE_HARD && info->type != H5L_TYPE_SOFT) {
        if (last)
            snprintf(why, size, "a user-defined link (class %d) is not followed", (int)info->type);
        else
            snprintf(why, size, "%s is a user-defined link (class %d), not followed", where,
                     (int)info->type);
        return 1;
    }
    return 0;
}

/* Walks path from location one link at a time (each asked of the group
 * before it, so the walk costs one step a level), following soft links
 * through their targets. shown_prefix: how the group at location is shown
 * in messages. */
static int walk(hid_t location, const char *path, const char *shown_prefix, int top,
                unsigned *soft_left, char *why, size_t size)
{
    int absolute = path[0] == '/';
    hid_t at = H5Oopen(location, absolute ? "/" : ".", H5P_DEFAULT);
    if (at < 0)
        return 0;
    char where[1024];
    snprintf(where, sizeof where, "%s", absolute ? "" : shown_prefix);
    char *copy = strdup(path);
    int found = 0;
    char *rest = copy;
    while (copy != NULL && !found) {
        while (*rest == '/')
            rest++;
        if (*rest == '\0')
            break;
        char *name = rest;
        char *slash = strchr(rest, '/');
        if (slash != NULL)
            *slash = '\0';
        rest = slash != NULL ? slash + 1 : rest + strlen(rest);
        while (*rest == '/')
            rest++;
        int last = *rest == '\0';
        size_t used = strlen(where);
        snprintf(where + used, sizeof where - used, "%s%s",
                 used > 0 && where[used - 1] == '/' ? "" : "/", name);
        H5L_info_t info;
        if (H5Lexists(at, name, H5P_DEFAULT) <= 0 || H5Lget_info(at, name, &info, H5P_DEFAULT) < 0)
            break;
        if (link_outside(at, name, &info, where, top && last, why, size)) {
            found = 1;
            break;
        }
        if (info.type == H5L_TYPE_SOFT) {
            if (*soft_left == 0)
                break; /* HDF5 refuses the path itself */
            (*soft_left)--;
            char *target = malloc(info.u.val_size + 1);
            if (target == NULL)
                break;
            target[0] = '\0';
            if (H5Lget_val(at, name, target, info.u.val_size + 1, H5P_DEFAULT) >= 0) {
                target[info.u.val_size] = '\0';
                /* A relative target is looked up from the link's group. */
                char parent[1024];
                snprintf(parent, sizeof parent, "%.*s", (int)used, where);
                found = walk(at, target, parent, 0, soft_left, why, size);
            }
            free(target);
            if (found)
                break;
        }
        if (last)
            break;
        hid_t next = H5Oopen(at, name, H5P_DEFAULT);
        if (next < 0)
            break;
        H5Oclose(at);
        at = next;
    }
    free(copy);
    H5Oclose(at);
    return found;
}

int zm__h5_outside(hid_t location, const char *path, char *why, size_t size)
{
    unsigned soft_left = SOFT_LINKS_MAX;
    why[0] = '\0';
    return walk(location, path, "", 1, &soft_left, why, size);
}

int zm__h5_dataset_check(hid_t file, hid_t dataset, const char *label, zm_err *err)
{
    /* Its object header is in the source (a path that left the file, were
     * there one HDF5 followed by itself, ends here). */
    zm__h5_object ours, its;
    if (zm__h5_describe(file, NULL, &ours) != 0 || zm__h5_describe(dataset, NULL, &its) != 0)
        return zm_err_set(err, -EIO, "%s: HDF5 cannot describe the dataset", label);
    if (ours.fileno != its.fileno)
        return zm_err_set(err, ZM__OUTSIDE, "%s: the dataset is in another file: not read", label);
    hid_t dcpl = H5Dget_create_plist(dataset);
    if (dcpl < 0)
        return zm_err_set(err, -EIO, "%s: HDF5 cannot give the dataset's layout", label);
    int rc = 0;
    int externals = H5Pget_external_count(dcpl);
    if (H5Pget_layout(dcpl) == H5D_VIRTUAL) {
        size_t count = 0;
        char file_name[256] = "?", dataset_name[256] = "?";
        if (H5Pget_virtual_count(dcpl, &count) >= 0 && count > 0) {
            H5Pget_virtual_filename(dcpl, 0, file_name, sizeof file_name);
            H5Pget_virtual_dsetname(dcpl, 0, dataset_name, sizeof dataset_name);
        }
        char file_text[256], dataset_text[256], more[48] = "";
        shown(file_text, sizeof file_text, file_name);
        shown(dataset_text, sizeof dataset_text, dataset_name);
        if (count > 1)
            snprintf(more, sizeof more, " and %zu more", count - 1);
        rc = zm_err_set(err, ZM__OUTSIDE,
                        "%s: a virtual dataset (its values mapped from %s:%s%s) is not read: a "
                        "mount serves only its source's own bytes",
                        label, file_text, dataset_text, more);
    } else if (externals != 0) {
        char name[256] = "?";
        off_t offset = 0;
        hsize_t bytes = 0;
        if (externals > 0)
            H5Pget_external(dcpl, 0, sizeof name, name, &offset, &bytes);
        char name_text[256], more[48] = "";
        shown(name_text, sizeof name_text, name);
        if (externals > 1)
            snprintf(more, sizeof more, " and %d more", externals - 1);
        rc = zm_err_set(err, ZM__OUTSIDE,
                        "%s: external storage (its values kept in %s%s, outside the source) is "
                        "not read",
                        label, name_text, more);
    }
    H5Pclose(dcpl);
    return rc;
}
