/*
 * runstat — run a command and report what it cost (tests/bench/run.sh).
 *
 *   runstat -o STATS [-p PIDFILE] -- COMMAND [ARGS...]
 *
 * Writes the child's pid to PIDFILE as soon as it runs, and on its exit
 * one line to STATS:
 *   wall_s user_s sys_s maxrss_kb exit_status
 * wall from fork to exit (CLOCK_MONOTONIC), user/sys/maxrss from wait4()'s
 * rusage (µs resolution, unlike /proc's clock ticks; maxrss is the peak RSS,
 * the same figure as VmHWM). SIGTERM/SIGINT/SIGHUP are forwarded to the
 * child, so `timeout` and the bench's EXIT trap stop the command through
 * this wrapper. Exits with the child's status (128+signal if killed).
 * Portable to any Linux without /usr/bin/time.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile pid_t child = -1;

static void forward(int sig)
{
    if (child > 0)
        kill(child, sig);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *stats = NULL, *pidfile = NULL;
    int i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            stats = argv[++i];
        } else if (!strcmp(argv[i], "-p") && i + 1 < argc) {
            pidfile = argv[++i];
        } else {
            break;
        }
    }
    if (stats == NULL || i >= argc) {
        fprintf(stderr, "usage: runstat -o STATS [-p PIDFILE] -- COMMAND [ARGS...]\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = forward;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    double t0 = mono_s();
    pid_t pid = fork();
    if (pid < 0) {
        perror("runstat: fork");
        return 1;
    }
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        execvp(argv[i], argv + i);
        perror(argv[i]);
        _exit(127);
    }
    child = pid;
    if (pidfile) {
        FILE *f = fopen(pidfile, "w");
        if (f) {
            fprintf(f, "%d\n", (int)pid);
            fclose(f);
        }
    }
    int status = 0;
    struct rusage ru;
    pid_t got;
    while ((got = wait4(pid, &status, 0, &ru)) < 0 && errno == EINTR)
        ;
    double wall = mono_s() - t0;
    if (got < 0) {
        perror("runstat: wait4");
        return 1;
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    FILE *f = fopen(stats, "w");
    if (f == NULL) {
        perror(stats);
        return 1;
    }
    fprintf(f, "%.6f %.6f %.6f %ld %d\n", wall,
            (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
            (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6, ru.ru_maxrss, code);
    fclose(f);
    return code;
}
