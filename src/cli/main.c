/* zarrmount: the command line front end. */
#include <stdio.h>
#include <string.h>

#include "zarrmount/cli.h"

static const char usage[] =
    "Usage: zarrmount select < REQUEST.json\n"
    "       zarrmount inspect FILE [--json]\n"
    "       zarrmount --version | --help\n"
    "\n"
    "Commands:\n"
    "  select    run the selection kernel on one JSON request read from stdin and\n"
    "            write the kept cells as JSON on stdout (see zarrmount(1) and\n"
    "            docs/select-contract.md); a refused request prints\n"
    "            {\"error\": reason} and exits 2\n"
    "  inspect   print the elements an .h5ad, loom or 10x .h5 file holds, how each\n"
    "            array is stored and read, and the default block size B0\n"
    "\n"
    "Mounting a source (zarrmount SOURCE MOUNTPOINT) is not built yet.\n";

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "select") == 0) {
        if (argc > 2) {
            fprintf(stderr, "zarrmount select: unexpected argument '%s' (the request is read from stdin)\n",
                    argv[2]);
            return ZM_EXIT_REFUSED;
        }
        /* Results can be hundreds of megabytes: write in large blocks. */
        static char buffer[1 << 20];
        setvbuf(stdout, buffer, _IOFBF, sizeof buffer);
        return zm_select_main(stdin, stdout);
    }
    if (argc >= 2 && strcmp(argv[1], "inspect") == 0)
        return zm_inspect_main(argc - 2, argv + 2, stdout);
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("zarrmount %s (subsampling spec version %d)\n", ZM_VERSION, 1);
        return ZM_EXIT_OK;
    }
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return ZM_EXIT_OK;
    }
    fputs(usage, stderr);
    return ZM_EXIT_REFUSED;
}
