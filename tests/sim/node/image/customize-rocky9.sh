#!/bin/sh
# Second mmdebstrap --customize-hook of the rocky9 node image (after customize.sh); $1 is the new root file system.
# The Debian base with real dnf 4, dnf-plugins-core (versionlock) and rpm that says it is Rocky Linux 9, so Ansible's
# facts say os_family RedHat, distribution Rocky 9, pkg_mgr dnf.  Packages come from the local rpm repository
# (tests/sim/packages/build_rpm_repo.py, bind-mounted at /srv/gpufleet-rpm); apt keeps working for nothing.
set -eu
root=$1

# /etc/os-release links to /usr/lib/os-release on Debian: replace the file, as rocky-release ships it.
cat > "$root/usr/lib/os-release" <<'RELEASE'
NAME="Rocky Linux"
VERSION="9.4 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.4"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:9::baseos"
HOME_URL="https://rockylinux.org/"
BUG_REPORT_URL="https://bugs.rockylinux.org/"
SUPPORT_END="2032-05-31"
ROCKY_SUPPORT_PRODUCT="Rocky-Linux-9"
ROCKY_SUPPORT_PRODUCT_VERSION="9.4"
REDHAT_SUPPORT_PRODUCT="Rocky Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="9.4"
RELEASE
for name in redhat-release rocky-release system-release; do
    echo 'Rocky Linux release 9.4 (Blue Onyx)' > "$root/etc/$name"
done
rm -f "$root/etc/debian_version" "$root/etc/lsb-release"

# Debian's rpm keeps its database in ~/.rpmdb (so nobody takes it for the system's): here it is the system's.
mkdir -p "$root/etc/rpm" "$root/var/lib/rpm"
echo '%_dbpath /var/lib/rpm' > "$root/etc/rpm/macros.gpufleet-sim"
rpm --dbpath "$root/var/lib/rpm" --initdb

# dnf: only the local repository, no GPG keys (the dummy rpms are unsigned), releasever 9, no weak dependencies.
mkdir -p "$root/etc/yum.repos.d" "$root/etc/dnf/vars" "$root/srv/gpufleet-rpm"
printf '[cuda-rhel9-x86_64]\nname=cuda-rhel9-x86_64\nbaseurl=file:///srv/gpufleet-rpm\nenabled=1\ngpgcheck=0\nmetadata_expire=0\n' \
    > "$root/etc/yum.repos.d/cuda-rhel9.repo"
# Debian's dnf-plugins-core enables the "local" plugin (a _dnf_local repository that does not exist yet): not on RHEL.
printf '[main]\nenabled = 0\n' > "$root/etc/dnf/plugins/local.conf"
echo 9 > "$root/etc/dnf/vars/releasever"
cat > "$root/etc/dnf/dnf.conf" <<'CONF'
[main]
gpgcheck=0
installonly_limit=3
clean_requirements_on_remove=True
best=False
skip_if_unavailable=False
install_weak_deps=False
reposdir=/etc/yum.repos.d
CONF

# Rocky has no dpkg-query: tools that ask dpkg first (a Debian host may have rpm installed too) must find rpm's
# database here, as on Rocky.  dpkg itself stays (the simulation compares versions with it).
mkdir -p "$root/usr/libexec/gpufleet-sim"
mv "$root/usr/bin/dpkg-query" "$root/usr/libexec/gpufleet-sim/dpkg-query"
