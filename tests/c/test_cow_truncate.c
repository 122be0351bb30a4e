/* What happens to the pages of a copy-on-write buffer (hostfirst_put with opts.copy_on_write = 1) and of a legacy
 * DLPack export (a private mapping too) that the consumer wrote, when the file is truncated, and when it is
 * truncated and then extended again (a checkpoint rewritten in place with O_TRUNC). This is what the header
 * (hostfirst_put, hostfirst_put_options.copy_on_write, hostfirst_load_options.copy_on_write,
 * hostfirst_view_to_dlpack in the legacy form) and the README say, checked on the running kernel:
 *   - truncation: a page entirely before the new end keeps what was written into it; a page past the new end,
 *     written or not, raises SIGBUS when touched (the kernel discards private copies there too);
 *   - truncate-then-extend: pages past the shortest end the file had, written or not, now read the file's new
 *     content: what the consumer wrote there is gone, with no signal and no error.
 * On Windows (no fork, and a mapped file cannot shrink) the same scenario checks the Windows contract instead: the
 * truncation, partial or whole, is refused while the mapping lives (ERROR_USER_MAPPED_FILE); the written pages keep
 * their writes, the others the file's bytes; nothing reaches the file; once the buffer or export is freed the file
 * can be cut.
 * argv[1]: a scratch directory. */
#define _POSIX_C_SOURCE 200809L
#ifndef _WIN32
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#endif
#include "check.h"
#include "platform.h"

/* A consumer that passed no max_version (Python's max_version=None): the legacy form. */
static const hostfirst_dlpack_options LEGACY = {.struct_size = sizeof(hostfirst_dlpack_options), .legacy = 1};

#define PAGE 4096
#define NBYTES (16 * PAGE)

static char path[1200];
static unsigned char data[NBYTES];
static long data_start; /* file offset of the tensor's first byte */

static void write_file(unsigned char fill) {
    char header[128];
    snprintf(header, sizeof header, "{\"t\":{\"dtype\":\"U8\",\"shape\":[%d],\"data_offsets\":[0,%d]}}", NBYTES,
             NBYTES);
    data_start = 8 + (long)strlen(header);
    memset(data, fill, sizeof data);
    const void *parts[] = {data};
    const size_t sizes[] = {sizeof data};
    write_safetensors(path, header, 1, parts, sizes);
}

#ifdef _WIN32
/* The file's byte at `off`, read through the file system. */
static unsigned char file_byte(long off) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    CHECK(fseek(f, off, SEEK_SET) == 0);
    int c = fgetc(f);
    fclose(f);
    CHECK(c != EOF);
    return (unsigned char)c;
}

/* One private mapping of the tensor at `p`: the consumer writes 0xab into its first and last pages; cutting the
 * file, to half the tensor or to nothing, is refused; the mapping and the file are as they were. */
static void scenario(unsigned char *p) {
    size_t last = NBYTES - 1, mid = NBYTES / 2 + 3 * PAGE;
    CHECK(p[0] == 0x11 && p[last] == 0x11);
    p[0] = 0xab;
    p[last] = 0xab;
    CHECK(shrink_file(path, (uint64_t)(data_start + NBYTES / 2)) == SHRINK_REFUSED_WHILE_MAPPED);
    CHECK(shrink_file(path, 0) == SHRINK_REFUSED_WHILE_MAPPED);
    CHECK(p[0] == 0xab && p[last] == 0xab && p[mid] == 0x11);
    CHECK(file_byte(data_start) == 0x11 && file_byte(data_start + (long)last) == 0x11);
}
#else
/* Reads p[off] in a child: its exit status, or 128 + the signal that killed it. */
static int read_in_child(const volatile unsigned char *p, size_t off, unsigned char expect) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(p[off] == expect ? 0 : 1);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

static void set_length(off_t len) {
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, len) == 0);
    CHECK(close(fd) == 0);
}

/* The new content 0x5a from `from` (a file offset) to the file's full length. */
static void rewrite_from(off_t from) {
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    static unsigned char fresh[NBYTES + PAGE]; /* the header too, when rewritten from 0 */
    memset(fresh, 0x5a, sizeof fresh);
    off_t end = data_start + NBYTES;
    CHECK(end - from <= (off_t)sizeof fresh);
    CHECK(ftruncate(fd, end) == 0);
    CHECK(pwrite(fd, fresh, (size_t)(end - from), from) == end - from);
    CHECK(close(fd) == 0);
}

/* One private mapping of the tensor at `p`: the consumer writes 0xab into its first and last pages, then the
 * file is cut to keep only the first half of the tensor, then extended again with new bytes. */
static void scenario(unsigned char *p) {
    size_t last = NBYTES - 1, mid = NBYTES / 2 + 3 * PAGE;
    CHECK(p[0] == 0x11 && p[last] == 0x11);
    p[0] = 0xab;
    p[last] = 0xab;
    /* Truncation: the first half stays (with the write), the rest faults, written or not. */
    set_length(data_start + NBYTES / 2);
    CHECK(p[0] == 0xab);
    CHECK(read_in_child(p, 0, 0xab) == 0);
    CHECK(read_in_child(p, last, 0xab) == 128 + SIGBUS);
    CHECK(read_in_child(p, mid, 0x11) == 128 + SIGBUS);
    /* Extended again with new content: no fault, and the page written past the cut shows the file's new
     * bytes; the consumer's write there is lost. The page before the cut keeps its write. */
    rewrite_from(data_start + NBYTES / 2);
    CHECK(p[last] == 0x5a);
    CHECK(p[mid] == 0x5a);
    CHECK(p[0] == 0xab);
    /* Rewritten in place with O_TRUNC (cut to nothing, then written whole): every page, written or not, now
     * reads the new file. */
    p[0] = 0xcd;
    set_length(0);
    rewrite_from(0);
    CHECK(p[0] == 0x5a);
    CHECK(p[last] == 0x5a);
}
#endif

int main(int argc, char **argv) {
    CHECK(argc == 2);
    snprintf(path, sizeof path, "%s/cow_truncate.safetensors", argv[1]);
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    hostfirst_put_options o;
    CHECK_OK(hostfirst_put_options_init(&o, sizeof o));
    o.copy_on_write = 1;

    /* A copy-on-write put. */
    write_file(0x11);
    hostfirst_file *f = NULL;
    hostfirst_view *v = NULL;
    hostfirst_buffer *b = NULL;
    CHECK_OK(hostfirst_file_open(path, &f));
    CHECK_OK(hostfirst_file_view(f, "t", &v));
    CHECK_OK(hostfirst_put(v, &cpu, &o, &b, NULL));
    int backed = 0;
    CHECK_OK(hostfirst_buffer_is_file_backed(b, &backed));
    CHECK(backed == 1);
    hostfirst_buffer_info info = {.struct_size = sizeof info};
    CHECK_OK(hostfirst_buffer_describe(b, &info));
    scenario((unsigned char *)(uintptr_t)info.address);
    CHECK_OK(hostfirst_buffer_free(b));
    CHECK_OK(hostfirst_view_free(v));
    CHECK_OK(hostfirst_file_free(f));
#ifdef _WIN32
    CHECK(shrink_file(path, 0) == 0); /* no mapping left */
#endif

    /* A legacy DLPack export of a view (the same private mapping). */
    write_file(0x11);
    hostfirst_dlpack_managed_tensor *t = NULL;
    CHECK_OK(hostfirst_file_open(path, &f));
    CHECK_OK(hostfirst_file_view(f, "t", &v));
    CHECK_OK(hostfirst_view_to_dlpack(v, &LEGACY, NULL, &t));
    CHECK_OK(hostfirst_view_free(v));
    CHECK_OK(hostfirst_file_free(f));
    scenario((unsigned char *)t->dl_tensor.data);
    t->deleter(t);
#ifdef _WIN32
    CHECK(shrink_file(path, 0) == 0);
#endif
    CHECK(live_handles() == 0);
    return 0;
}
