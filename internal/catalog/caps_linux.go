//go:build linux && cgo

package catalog

/*
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

// The reader argument (readerCommand): TestReaderCommandInC checks that
// the two say the same.
#define FDL_READER_COMMAND "__fdl-mirror-catalog-reader"

static const char *fdl_reader_command(void) { return FDL_READER_COMMAND; }

// fdl_only_thread: 1 where this process runs a single thread.
static int fdl_only_thread(void) {
	DIR *d = opendir("/proc/self/task");
	if (!d) return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.') n++;
	closedir(d);
	return n == 1;
}

// fdl_reader_caps drops a reader's capabilities (the ambient set, the
// bounding set, then every set) as the binary is loaded, before the Go
// runtime starts a thread: every thread it starts then inherits none.
// Dropping them later, once the runtime's threads run, takes one psx
// round over every thread for each of the 41 bounding-set capabilities,
// which cost a reader run as root 6 to 50 ms of CPU (and up to 150 ms
// of wall time on a loaded machine). Anything unexpected leaves them as
// they are: dropCapabilities (sandbox_linux.go) then drops them, or
// fails the reader.
__attribute__((constructor)) static void fdl_reader_caps(void) {
	char buf[4096];
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0) return;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) return;
	buf[n] = 0;
	size_t first = strlen(buf) + 1; // argv[0]
	if (first >= (size_t)n || strcmp(buf + first, FDL_READER_COMMAND) != 0) return;
	for (char *a = buf + first; a < buf + n; a += strlen(a) + 1)
		if (strcmp(a, "caps=keep") == 0) return; // a test's reader keeps them
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2];
	if (syscall(SYS_capget, &hdr, data) != 0) return;
	if ((data[0].permitted | data[1].permitted | data[0].effective | data[1].effective |
	     data[0].inheritable | data[1].inheritable) == 0)
		return;
	if (!fdl_only_thread()) return;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) return;
	for (int c = 0; prctl(PR_CAPBSET_READ, c, 0, 0, 0) >= 0; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0) return;
	memset(data, 0, sizeof data);
	syscall(SYS_capset, &hdr, data);
}
*/
import "C"

// readerCommandInC is the reader argument as the C constructor above
// knows it.
func readerCommandInC() string { return C.GoString(C.fdl_reader_command()) }
