/* bin/envd of the self-contained artifact: exec the artifact's own interpreter as
 * `<root>/python/bin/python3 -I -m envd ARGS...`, where <root> is two levels above this binary
 * (found through /proc/self/exe, so a symlink such as /usr/bin/envd works and the directory can
 * live anywhere). Built static: it needs nothing from the image, not even /bin/sh.
 *
 * -I: PYTHONPATH, PYTHONHOME and user site directories of the image never reach envd.
 * ENVD_SPAWN_HELPER names the prebuilt helper in <root>/libexec unless it is set already (e.g. to
 * "off"). exec keeps the PID: systemd's main process (Type=notify) is envd itself.
 * Nothing else is added to the environment, and envd builds its children's from scratch. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void cut_last(char *path) {
    char *slash = strrchr(path, '/');
    if (slash != NULL) *slash = '\0';
}

int main(int argc, char **argv) {
    char root[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", root, sizeof root - 1);
    if (n <= 0) {
        perror("envd: cannot resolve /proc/self/exe (is /proc mounted?)");
        return 127;
    }
    root[n] = '\0';
    cut_last(root); /* <root>/bin */
    cut_last(root); /* <root> */

    char python[PATH_MAX], helper[PATH_MAX];
    if (snprintf(python, sizeof python, "%s/python/bin/python3", root) >= (int)sizeof python ||
        snprintf(helper, sizeof helper, "%s/libexec/spawn-helper", root) >= (int)sizeof helper) {
        fprintf(stderr, "envd: installation path too long: %s\n", root);
        return 127;
    }
    if (setenv("ENVD_SPAWN_HELPER", helper, 0) != 0) {
        perror("envd: setenv");
        return 127;
    }

    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (args == NULL) {
        perror("envd");
        return 127;
    }
    args[0] = python; /* a full path: the interpreter finds its prefix from it */
    args[1] = "-I";
    args[2] = "-m";
    args[3] = "envd";
    for (int i = 1; i < argc; i++) args[i + 3] = argv[i];
    execv(python, args);
    fprintf(stderr, "envd: cannot execute %s: ", python);
    perror(NULL);
    return 127;
}
