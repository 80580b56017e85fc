/* GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
 * SPDX-License-Identifier: GPL-3.0-or-later
 *
 * uname() of a simulated GPU node: the kernel release is the one the node booted.
 *
 * A container shares the host's kernel, so uname(2) answers the host's release.  The node's boot step
 * (gpufleet_sim/boot.py) writes the release of the kernel the simulated node booted to
 * /run/gpufleet-sim/kernel-release; this library, loaded into every process of the node through
 * /etc/ld.so.preload, puts it into utsname.release.  So `uname -r`, Python's os.uname() and
 * platform.release(), and with them Ansible's ansible_kernel fact, report the booted kernel, as on metal.
 * Every other field, and the release when the file is missing or empty, is the kernel's own answer.
 * Statically linked programs and direct syscalls are not affected.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#define GPUFLEET_KERNEL_RELEASE "/run/gpufleet-sim/kernel-release"

int uname(struct utsname *buf)
{
    char release[sizeof(buf->release)];
    ssize_t length;
    size_t end;
    int saved, fd;

    if (syscall(SYS_uname, buf) != 0)
        return -1;
    saved = errno;
    fd = open(GPUFLEET_KERNEL_RELEASE, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        length = read(fd, release, sizeof(release) - 1);
        close(fd);
        if (length > 0) {
            release[length] = '\0';
            end = strcspn(release, "\r\n \t");
            release[end] = '\0';
            if (end > 0)
                memcpy(buf->release, release, end + 1);
        }
    }
    errno = saved;
    return 0;
}
