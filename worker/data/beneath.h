/*
 * beneath: open a file a job names (a data file, a shard found by a glob)
 * so that it resolves inside a root folder the agent was given
 * (--data-root), and nowhere else.
 *
 * A job spec is written by whoever may submit jobs; the agent runs its
 * ranks as its own user. Without confinement a spec could train on (and
 * leak through error messages) any file that user can read: /etc/passwd,
 * another user's data, the agent's keys. So a path is refused when it is
 * absolute, when one of its components is "..", or when a symbolic link on
 * the way leads out of the root. Links that stay inside the root (a
 * "current" link to a dataset version) keep working.
 *
 * The kernel does this atomically with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS) (Linux 5.6+). Where openat2 is missing (ENOSYS:
 * older kernels, some seccomp sandboxes), beneath_open walks the path one
 * component at a time from the root with O_NOFOLLOW, following a relative
 * link by splicing its target into the rest of the path and refusing an
 * absolute one or a ".." that would climb above the root. The walk is
 * race-free for the same reason openat2 is: every step opens relative to
 * the folder already opened, never by name from the top.
 */
#ifndef RINGMASTER_WORKER_BENEATH_H
#define RINGMASTER_WORKER_BENEATH_H

#include <stdbool.h>

/*
 * Whether `path` may be given relative to a root at all: not empty, not
 * absolute, no ".." component. A pure function of the string (what the
 * coordinator's submission check and this module agree on).
 */
bool beneath_path_ok(const char *path);

/*
 * Open `path` (relative, as the spec gives it) beneath the folder `root`
 * with open(2) `flags` (O_RDONLY and the like; O_CLOEXEC is added). Returns
 * 0 and sets *ret_fd, or a negative errno: -EXDEV when the path is absolute,
 * has "..", or a link leads out of the root; -ELOOP for too many links or a
 * magic link (/proc/self/fd/N); anything open(2) returns otherwise (-ENOENT,
 * -EACCES, ...). `root` NULL: a plain open(2) of `path`, unconfined (the
 * user's own `ringworker train` without --data-root).
 */
int beneath_open(const char *root, const char *path, int flags, int *ret_fd);

/*
 * The same with the component walk forced (the fallback for kernels without
 * openat2), so tests can check both ways on one machine.
 */
int beneath_open_walk(const char *root, const char *path, int flags, int *ret_fd);

#endif
