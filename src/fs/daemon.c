#include "fs/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs/log.h"

/* The child the parent waits for: a stop signal sent to the parent (^C at
 * the terminal, `timeout`, a service manager) is passed on to it, so that
 * a mount still opening its source ends rather than mounting later in the
 * background of a command that was stopped. */
static volatile pid_t waited_child;

static void zm__pass_on(int signal_number)
{
    if (waited_child > 0)
        kill(waited_child, signal_number);
}

/* The parent: waits for the child's word, or for the child to end. */
static _Noreturn void zm__daemon_wait(pid_t child, int report)
{
    waited_child = child;
    struct sigaction pass = {0};
    pass.sa_handler = zm__pass_on;
    sigemptyset(&pass.sa_mask);
    const int stop_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof stop_signals / sizeof stop_signals[0]; i++)
        sigaction(stop_signals[i], &pass, NULL);
    unsigned char status;
    ssize_t got;
    do
        got = read(report, &status, 1);
    while (got < 0 && errno == EINTR);
    if (got == 1)
        _exit(status);
    /* The pipe closed without a word: the child ended while starting, after
     * printing why; its exit status is ours. */
    int wait_status;
    while (waitpid(child, &wait_status, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "zarrmount: the daemon ended while starting\n");
            _exit(1);
        }
    }
    if (WIFEXITED(wait_status))
        _exit(WEXITSTATUS(wait_status));
    fprintf(stderr, "zarrmount: the daemon was killed by signal %d while starting\n",
            WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0);
    _exit(1);
}

int zm__daemon_fork(int *report, zm_err *err)
{
    int pipe_fds[2];
    /* Close-on-exec: fusermount3, which libfuse runs to mount without root,
     * must not hold the pipe open and keep the parent waiting. */
    if (pipe2(pipe_fds, O_CLOEXEC) != 0)
        return zm_err_set(err, -errno, "cannot go to the background: pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) {
        int saved = errno;
        close(pipe_fds[0]);
        close(pipe_fds[1]);
        return zm_err_set(err, -saved, "cannot go to the background: fork: %s", strerror(saved));
    }
    if (child > 0) {
        close(pipe_fds[1]);
        zm__daemon_wait(child, pipe_fds[0]);
    }
    close(pipe_fds[0]);
    /* A session of its own: the terminal's hangup and ^C no longer reach
     * the daemon once the parent has gone. */
    setsid();
    *report = pipe_fds[1];
    return 0;
}

void zm__daemon_detach(int report)
{
    if (chdir("/") != 0)
        zm_log(LOG_WARNING, "cannot change directory to /: %s", strerror(errno));
    int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
        dup2(null_fd, STDIN_FILENO);
        dup2(null_fd, STDOUT_FILENO);
        dup2(null_fd, STDERR_FILENO);
        if (null_fd > STDERR_FILENO)
            close(null_fd);
    }
    zm__log_to_syslog();
    unsigned char status = 0;
    ssize_t written;
    do
        written = write(report, &status, 1);
    while (written < 0 && errno == EINTR);
    close(report);
}
