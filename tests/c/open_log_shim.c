/* An LD_PRELOAD shim for the file-safety tests (instead of strace): logs every open, openat,
 * creat and rename of a path under $SP_SHIM_DIR to $SP_SHIM_LOG, one line each:
 *
 *   open <absolute path> flags=<hex> creat=<0|1> excl=<0|1> trunc=<0|1> write=<0|1> nofollow=<0|1> rc=<fd or -1> mode=<octal mode of the file after the call> dirmode=<octal mode of its directory> dirowner=<uid>
 *   rename <absolute from> -> <absolute to> rc=<0|-1>
 *
 * Build: cc -shared -fPIC -o open_log_shim.so open_log_shim.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The absolute form of (dirfd, path), without resolving symlinks. */
static int absolute(int dirfd, const char *path, char *out, size_t n) {
    char base[PATH_MAX];
    if (!path) return -1;
    if (path[0] == '/') {
        snprintf(out, n, "%s", path);
        return 0;
    }
    if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof base)) return -1;
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t len = readlink(link, base, sizeof base - 1);
        if (len < 0) return -1;
        base[len] = '\0';
    }
    snprintf(out, n, "%s/%s", base, path);
    return 0;
}

static int wanted(const char *abs) {
    const char *dir = getenv("SP_SHIM_DIR");
    return dir && *dir && strncmp(abs, dir, strlen(dir)) == 0;
}

static void append(const char *line) {
    const char *log = getenv("SP_SHIM_LOG");
    if (!log) return;
    /* The raw system call: going through open() would log ourselves. */
    int fd = (int)syscall(SYS_openat, AT_FDCWD, log, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t ignored = write(fd, line, strlen(line));
    (void)ignored;
    close(fd);
}

static void log_open(int dirfd, const char *path, int flags, int rc) {
    char abs[2 * PATH_MAX], line[5 * PATH_MAX], dir[2 * PATH_MAX];
    int saved = errno;
    if (absolute(dirfd, path, abs, sizeof abs) == 0 && wanted(abs)) {
        struct stat st, dst;
        unsigned mode = 0, dirmode = 0, dirowner = 0;
        if (rc >= 0 && fstat(rc, &st) == 0) mode = st.st_mode & 07777;
        snprintf(dir, sizeof dir, "%s", abs);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        if (stat(dir, &dst) == 0) {
            dirmode = dst.st_mode & 07777;
            dirowner = dst.st_uid;
        }
        int acc = flags & O_ACCMODE;
        snprintf(line, sizeof line,
                 "open %s flags=%#x creat=%d excl=%d trunc=%d write=%d nofollow=%d rc=%d mode=%o dirmode=%o dirowner=%u\n", abs,
                 flags, !!(flags & O_CREAT), !!(flags & O_EXCL), !!(flags & O_TRUNC), acc == O_WRONLY || acc == O_RDWR,
                 !!(flags & O_NOFOLLOW), rc < 0 ? -1 : rc, mode, dirmode, dirowner);
        append(line);
    }
    errno = saved;
}

static void log_rename(int olddirfd, const char *from, int newdirfd, const char *to, int rc) {
    char a[2 * PATH_MAX], b[2 * PATH_MAX], line[5 * PATH_MAX];
    int saved = errno;
    if (absolute(olddirfd, from, a, sizeof a) == 0 && absolute(newdirfd, to, b, sizeof b) == 0 && (wanted(a) || wanted(b))) {
        snprintf(line, sizeof line, "rename %s -> %s rc=%d\n", a, b, rc < 0 ? -1 : 0);
        append(line);
    }
    errno = saved;
}

#define MODE_ARG(flags, mode)                                                                                          \
    mode_t mode = 0;                                                                                                   \
    if ((flags) & (O_CREAT | __O_TMPFILE)) {                                                                           \
        va_list ap;                                                                                                    \
        va_start(ap, flags);                                                                                           \
        mode = (mode_t)va_arg(ap, int);                                                                                \
        va_end(ap);                                                                                                    \
    }

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*rename_fn)(const char *, const char *);
typedef int (*renameat_fn)(int, const char *, int, const char *);
typedef int (*renameat2_fn)(int, const char *, int, const char *, unsigned int);

#define REAL(name, type)                                                                                               \
    static type real = NULL;                                                                                           \
    if (!real) real = (type)dlsym(RTLD_NEXT, name)

int open(const char *path, int flags, ...) {
    MODE_ARG(flags, mode)
    REAL("open", open_fn);
    int rc = real(path, flags, mode);
    log_open(AT_FDCWD, path, flags, rc);
    return rc;
}

int open64(const char *path, int flags, ...) {
    MODE_ARG(flags, mode)
    REAL("open64", open_fn);
    int rc = real(path, flags, mode);
    log_open(AT_FDCWD, path, flags, rc);
    return rc;
}

int openat(int dirfd, const char *path, int flags, ...) {
    MODE_ARG(flags, mode)
    REAL("openat", openat_fn);
    int rc = real(dirfd, path, flags, mode);
    log_open(dirfd, path, flags, rc);
    return rc;
}

int openat64(int dirfd, const char *path, int flags, ...) {
    MODE_ARG(flags, mode)
    REAL("openat64", openat_fn);
    int rc = real(dirfd, path, flags, mode);
    log_open(dirfd, path, flags, rc);
    return rc;
}

int creat(const char *path, mode_t mode) {
    return open(path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

int creat64(const char *path, mode_t mode) {
    return open64(path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

int rename(const char *from, const char *to) {
    REAL("rename", rename_fn);
    int rc = real(from, to);
    log_rename(AT_FDCWD, from, AT_FDCWD, to, rc);
    return rc;
}

int renameat(int olddirfd, const char *from, int newdirfd, const char *to) {
    REAL("renameat", renameat_fn);
    int rc = real(olddirfd, from, newdirfd, to);
    log_rename(olddirfd, from, newdirfd, to, rc);
    return rc;
}

int renameat2(int olddirfd, const char *from, int newdirfd, const char *to, unsigned int flags) {
    REAL("renameat2", renameat2_fn);
    int rc = real(olddirfd, from, newdirfd, to, flags);
    log_rename(olddirfd, from, newdirfd, to, rc);
    return rc;
}
