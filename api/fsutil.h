/*
 * fsutil: small file-system helpers that more than one process needs, so
 * that each exists once: the mkdir -p of a folder (the coordinator's
 * database folder, the broker's socket folder, a rank's snapshot folder) and
 * the rule for a path that must stay beneath a root (the job spec's data
 * paths at submission, the rank's before it opens them).
 * Depends on libc only; no global state, safe from any thread.
 */
#ifndef RINGMASTER_API_FSUTIL_H
#define RINGMASTER_API_FSUTIL_H

#include <stdbool.h>
#include <sys/types.h>

/*
 * mkdir -p: creates every missing folder of `path`, the last one included,
 * each with `mode` (before the umask). Repeated and trailing slashes are
 * accepted. Returns 0 when `path` is (now) a folder, or a negative errno:
 * -EINVAL for a NULL or empty path, -ENOTDIR when something that is not a
 * folder is in the way (the path itself or one of its parents), -ENOMEM, or
 * what mkdir(2) or stat(2) said (-EACCES, -EROFS, -ENAMETOOLONG, ...).
 * Folders it created before a failure are left in place.
 */
int fs_mkdir_p(const char *path, mode_t mode);

/*
 * mkdir -p of the folder holding `path` (its dirname): what a writer needs
 * before it creates the file `path`. A path with no folder part ("db.sqlite",
 * "/db.sqlite") needs nothing and returns 0. Errors as fs_mkdir_p(), -EINVAL
 * for a NULL or empty path.
 */
int fs_mkdir_parent(const char *path, mode_t mode);

/*
 * Whether `path`, taken relative to some root, names something beneath it
 * by its text alone: not NULL, not empty, not absolute, no ".." component
 * ("a..b" and "c.." are fine). Links are the opener's business
 * (worker/data/beneath.h).
 */
bool fs_path_beneath(const char *path);

#endif
