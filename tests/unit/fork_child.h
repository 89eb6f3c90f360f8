/* For unit tests of reads across processes (test_cma.c, test_mem.c): a
 * forked child that publishes a record to its parent through a pipe, then
 * waits to be killed. Include after cmocka.h. */
#ifndef OOBX_TEST_FORK_CHILD_H
#define OOBX_TEST_FORK_CHILD_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs in the child: fills rec (the child's copy); pipe_fd is the child's
 * end of the pipe, a descriptor a test may name. Exits the child on error. */
typedef void (*child_publish_fn)(void *rec, int pipe_fd);

/* Forks the child; the parent gets its len-byte record in rec. */
static inline void child_fork(child_publish_fn publish, void *rec, size_t len)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        publish(rec, p[1]);
        if (write(p[1], rec, len) != (ssize_t)len) _exit(1);
        pause();
        _exit(0);
    }
    close(p[1]);
    assert_int_equal(read(p[0], rec, len), (ssize_t)len);
    close(p[0]);
}

static inline void child_kill(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

#endif
