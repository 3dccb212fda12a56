/*
 * envd spawn helper: the few steps between fork and exec that Python cannot do without a
 * full fork, so envd can start children with vfork (posix_spawn-like cost) instead.
 *
 * usage: spawn-helper REPORT_FD UID GID GROUPS CWD PTY CMD [ARGS...]
 *   REPORT_FD  pipe to envd; closed by the final exec; on failure gets "step: reason"
 *   UID GID    numeric ids to switch to, or "-" to keep envd's (envd not root)
 *   GROUPS     comma-separated supplementary gids (primary first), or "-"
 *   CWD        entered after dropping privileges, as the reference envd does
 *   PTY        "1": stdin is a pty; make it the controlling terminal (after setsid)
 *
 * The resets match the reference envd's wrapper
 *   /bin/sh -c 'echo 100 > /proc/$$/oom_score_adj && exec ionice -c 2 -n 4 nice -n D "$@"'
 * and a command that cannot be exec'd is run through `/bin/sh -c 'exec "$@"'`, which prints
 * the error and exits 127/126, because the reference reports it that way (not as an RPC error).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define IOPRIO_WHO_PROCESS 1
#define IOPRIO_BEST_EFFORT_4 ((2 << 13) | 4)
#define MAX_GROUPS 1024

static int report_fd = -1;

static void fail(const char *step) {
    /* Lower-case like Go's errno texts ("permission denied"), which the reference reports. */
    char reason[256];
    snprintf(reason, sizeof reason, "%s", strerror(errno));
    reason[0] = (char)tolower((unsigned char)reason[0]);
    char message[512];
    int length = snprintf(message, sizeof message, "%s: %s", step, reason);
    if (length > 0 && write(report_fd, message, (size_t)length) < 0) {
        /* nothing left to tell anyone */
    }
    _exit(1);
}

static void switch_user(const char *uid_text, const char *gid_text, const char *groups_text) {
    if (strcmp(uid_text, "-") == 0) {
        return;
    }
    gid_t groups[MAX_GROUPS];
    size_t count = 0;
    char *list = strdup(groups_text);
    for (char *item = strtok(list, ","); item != NULL && count < MAX_GROUPS;
         item = strtok(NULL, ",")) {
        groups[count++] = (gid_t)strtoul(item, NULL, 10);
    }
    gid_t gid = (gid_t)strtoul(gid_text, NULL, 10);
    uid_t uid = (uid_t)strtoul(uid_text, NULL, 10);
    if (setgroups(count, groups) != 0 || setresgid(gid, gid, gid) != 0) {
        fail("credentials");
    }
    if (setresuid(uid, uid, uid) != 0) {
        fail("credentials");
    }
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s REPORT_FD UID GID GROUPS CWD PTY CMD [ARGS...]\n", argv[0]);
        return 2;
    }
    report_fd = atoi(argv[1]);
    if (fcntl(report_fd, F_SETFD, FD_CLOEXEC) != 0) {
        return 2;
    }
    int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (oom < 0 || write(oom, "100", 3) != 3) {
        fail("oom_score_adj");
    }
    close(oom);
    if (setpriority(PRIO_PROCESS, 0, 0) != 0) {
        fail("setpriority");
    }
    if (syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_BEST_EFFORT_4) != 0) {
        fail("ioprio_set");
    }
    if (strcmp(argv[6], "1") == 0 && ioctl(0, TIOCSCTTY, 0) != 0) {
        fail("controlling tty");
    }
    switch_user(argv[2], argv[3], argv[4]);
    if (chdir(argv[5]) != 0) {
        char step[4200];
        snprintf(step, sizeof step, "chdir %s", argv[5]);
        fail(step);
    }
    char **command = argv + 7;
    execvp(command[0], command);
    /* Reuse argv[3..6] for the shell's own arguments: /bin/sh -c 'exec "$@"' -- CMD ARGS */
    char **shell = argv + 3;
    shell[0] = "/bin/sh";
    shell[1] = "-c";
    shell[2] = "exec \"$@\"";
    shell[3] = "--";
    execv("/bin/sh", shell);
    fail("exec /bin/sh");
    return 1;
}
