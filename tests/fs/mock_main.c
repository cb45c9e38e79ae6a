/* zarrmount-mock: the mount command over the mock tree (tests/fs/mock_tree.c),
 * for tests/fs/test_fuse.py. */
#include "zarrmount/fs.h"

int main(int argc, char **argv)
{
    return zm_fs_main(argc, argv);
}
