# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Package-manager-exact version comparison for dpkg and rpm.

* :func:`dpkg_compare` implements the algorithm of Debian Policy 5.6.12 exactly
  as ``dpkg --compare-versions`` does (``verrevcmp`` in dpkg's
  ``lib/dpkg/version.c``): epoch numerically, then upstream version, then
  Debian revision; within a part non-digit runs compare character by
  character where ``~`` sorts before everything (even the end of the string),
  letters sort before non-letters, and digit runs compare numerically.
* :func:`rpm_compare` implements rpm's ``rpmvercmp`` (including ``~`` and
  ``^``) on ``[epoch:]version[-release]``: epoch numerically (missing = 0),
  then version, then release.  When only one side carries a release the
  releases are *not* compared (the convention of rpm's dependency matching,
  ``rpmverOverlap``; note that ``rpm.labelCompare``/``rpmverCmp`` instead rank
  the side without a release lower).
* :func:`matches_pin` decides whether an installed version satisfies a
  user-supplied version pin.

Stdlib only; no Ansible imports.
"""

from __future__ import annotations

import re

__all__ = [
    'VersionError',
    'compare',
    'dpkg_compare',
    'matches_pin',
    'rpm_compare',
    'split_version',
    'SCHEMES',
]

SCHEMES = ('dpkg', 'rpm')

_DIGITS_RE = re.compile(r'^[0-9]+$')
# dpkg accepts these (anything else only draws a warning from dpkg; we refuse it).
_DPKG_UPSTREAM_RE = re.compile(r'^[A-Za-z0-9.+~:-]+$')
_DPKG_REVISION_RE = re.compile(r'^[A-Za-z0-9.+~]+$')
# rpmbuild's ALLOWED_CHARS_VERREL is alnum plus "._+%{}~^".
_RPM_PART_RE = re.compile(r'^[A-Za-z0-9._+%{}~^]+$')
_RPM_VERSION_RE = re.compile(r'^[A-Za-z0-9._+%{}~^-]+$')


class VersionError(ValueError):
    """Raised for an empty or malformed version string or an unknown scheme."""


def _check_text(value, what='version'):
    if not isinstance(value, str):
        raise VersionError('%s must be a string, got %s: %r' % (what, type(value).__name__, value))
    text = value.strip()
    if not text:
        raise VersionError('%s is empty: %r' % (what, value))
    if any(ch.isspace() for ch in text):
        raise VersionError('%s contains whitespace: %r' % (what, value))
    return text


def _parse_dpkg(value):
    """Return ``(epoch, upstream, revision, epoch_given)`` for a Debian version."""
    text = _check_text(value)
    epoch = 0
    epoch_given = False
    rest = text
    if ':' in text:
        epoch_text, rest = text.split(':', 1)
        if not epoch_text:
            raise VersionError('epoch in version %r is empty' % value)
        if not _DIGITS_RE.match(epoch_text):
            raise VersionError('epoch in version %r is not a number' % value)
        if not rest:
            raise VersionError('nothing after colon in version %r' % value)
        epoch = int(epoch_text)
        epoch_given = True
    revision = None
    upstream = rest
    if '-' in rest:
        upstream, revision = rest.rsplit('-', 1)
        if not revision:
            raise VersionError('revision in version %r is empty' % value)
        if not _DPKG_REVISION_RE.match(revision):
            raise VersionError('invalid character in revision of version %r' % value)
    if not upstream:
        raise VersionError('upstream version in %r is empty' % value)
    if not _DPKG_UPSTREAM_RE.match(upstream):
        raise VersionError('invalid character in upstream part of version %r' % value)
    return epoch, upstream, revision, epoch_given


def _parse_rpm(value):
    """Return ``(epoch, version, release, epoch_given)`` for ``[E:]V[-R]``."""
    text = _check_text(value)
    epoch = 0
    epoch_given = False
    rest = text
    match = re.match(r'^([0-9]*):', text)
    if match:
        if not match.group(1):
            raise VersionError('epoch in version %r is empty' % value)
        epoch = int(match.group(1))
        epoch_given = True
        rest = text[match.end():]
        if not rest:
            raise VersionError('nothing after colon in version %r' % value)
    if ':' in rest:
        raise VersionError('epoch in version %r is not a number' % value)
    release = None
    version = rest
    if '-' in rest:
        version, release = rest.rsplit('-', 1)
        if not release:
            raise VersionError('release in version %r is empty' % value)
        if not _RPM_PART_RE.match(release):
            raise VersionError('invalid character in release of version %r' % value)
    if not version:
        raise VersionError('version part of %r is empty' % value)
    if not _RPM_VERSION_RE.match(version):
        raise VersionError('invalid character in version part of %r' % value)
    return epoch, version, release, epoch_given


def _sign(number):
    return (number > 0) - (number < 0)


def _dpkg_order(char):
    """Weight of one non-digit character in dpkg's ``verrevcmp``; '' is the end."""
    if char == '':
        return 0
    if char.isdigit():
        return 0
    if ('a' <= char <= 'z') or ('A' <= char <= 'Z'):
        return ord(char)
    if char == '~':
        return -1
    return ord(char) + 256


def _dpkg_verrevcmp(left, right):
    """Port of dpkg's ``verrevcmp``; returns -1, 0 or 1."""
    left = left or ''
    right = right or ''
    i = 0
    j = 0
    len_l = len(left)
    len_r = len(right)
    while i < len_l or j < len_r:
        first_diff = 0
        while (i < len_l and not left[i].isdigit()) or (j < len_r and not right[j].isdigit()):
            a_ord = _dpkg_order(left[i] if i < len_l else '')
            b_ord = _dpkg_order(right[j] if j < len_r else '')
            if a_ord != b_ord:
                return _sign(a_ord - b_ord)
            i += 1
            j += 1
        while i < len_l and left[i] == '0':
            i += 1
        while j < len_r and right[j] == '0':
            j += 1
        while i < len_l and j < len_r and left[i].isdigit() and right[j].isdigit():
            if not first_diff:
                first_diff = ord(left[i]) - ord(right[j])
            i += 1
            j += 1
        if i < len_l and left[i].isdigit():
            return 1
        if j < len_r and right[j].isdigit():
            return -1
        if first_diff:
            return _sign(first_diff)
    return 0


def _isalnum(char):
    return char.isdigit() or ('a' <= char <= 'z') or ('A' <= char <= 'Z')


def _rpmvercmp(left, right):
    """Port of rpm's ``rpmvercmp`` (rpmio/rpmvercmp.c, with '~' and '^'); returns -1, 0 or 1."""
    if left == right:
        return 0
    one = 0
    two = 0
    len_1 = len(left)
    len_2 = len(right)
    while one < len_1 or two < len_2:
        while one < len_1 and not _isalnum(left[one]) and left[one] not in '~^':
            one += 1
        while two < len_2 and not _isalnum(right[two]) and right[two] not in '~^':
            two += 1
        ch1 = left[one] if one < len_1 else ''
        ch2 = right[two] if two < len_2 else ''
        # tilde sorts before everything else, even the end of the string
        if ch1 == '~' or ch2 == '~':
            if ch1 != '~':
                return 1
            if ch2 != '~':
                return -1
            one += 1
            two += 1
            continue
        # caret is like tilde, except that the end of the other string sorts lower
        if ch1 == '^' or ch2 == '^':
            if not ch1:
                return -1
            if not ch2:
                return 1
            if ch1 != '^':
                return 1
            if ch2 != '^':
                return -1
            one += 1
            two += 1
            continue
        if not (ch1 and ch2):
            break
        end1 = one
        end2 = two
        if ch1.isdigit():
            while end1 < len_1 and left[end1].isdigit():
                end1 += 1
            while end2 < len_2 and right[end2].isdigit():
                end2 += 1
            isnum = True
        else:
            while end1 < len_1 and left[end1].isalpha() and left[end1].isascii():
                end1 += 1
            while end2 < len_2 and right[end2].isalpha() and right[end2].isascii():
                end2 += 1
            isnum = False
        seg1 = left[one:end1]
        seg2 = right[two:end2]
        if not seg1:
            return -1  # cannot happen; mirrors rpm's "arbitrary" branch
        if not seg2:
            # different segment types: numeric is newer than alpha
            return 1 if isnum else -1
        if isnum:
            seg1 = seg1.lstrip('0')
            seg2 = seg2.lstrip('0')
            if len(seg1) != len(seg2):
                return 1 if len(seg1) > len(seg2) else -1
        if seg1 != seg2:
            return 1 if seg1 > seg2 else -1
        one = end1
        two = end2
    if one >= len_1 and two >= len_2:
        return 0
    return -1 if one >= len_1 else 1


def dpkg_compare(a, b):
    """Compare two Debian versions like ``dpkg --compare-versions``; returns -1, 0 or 1.

    A missing revision is the empty string, so ``1.0`` equals ``1.0-0``.
    Raises :class:`VersionError` for empty or malformed versions.
    """
    epoch_a, upstream_a, revision_a, dummy = _parse_dpkg(a)
    epoch_b, upstream_b, revision_b, dummy = _parse_dpkg(b)
    return _dpkg_cmp_parts((epoch_a, upstream_a, revision_a), (epoch_b, upstream_b, revision_b))


def _dpkg_cmp_parts(left, right):
    if left[0] != right[0]:
        return 1 if left[0] > right[0] else -1
    result = _dpkg_verrevcmp(left[1], right[1])
    if result:
        return result
    return _dpkg_verrevcmp(left[2] or '', right[2] or '')


def rpm_compare(a, b):
    """Compare two rpm ``[epoch:]version[-release]`` strings; returns -1, 0 or 1.

    The epoch compares numerically (missing = 0), then ``rpmvercmp`` on the
    version, then on the release; when one side has no release, the releases
    compare equal (so ``1.0`` equals ``1.0-3.el9``).
    Raises :class:`VersionError` for empty or malformed versions.
    """
    epoch_a, version_a, release_a, dummy = _parse_rpm(a)
    epoch_b, version_b, release_b, dummy = _parse_rpm(b)
    return _rpm_cmp_parts((epoch_a, version_a, release_a), (epoch_b, version_b, release_b))


def _rpm_cmp_parts(left, right):
    if left[0] != right[0]:
        return 1 if left[0] > right[0] else -1
    result = _rpmvercmp(left[1], right[1])
    if result:
        return result
    if left[2] is None or right[2] is None:
        return 0
    return _rpmvercmp(left[2], right[2])


def _check_scheme(scheme):
    if scheme not in SCHEMES:
        raise VersionError('unknown version scheme %r (expected one of: %s)' % (scheme, ', '.join(SCHEMES)))


def compare(a, b, scheme):
    """Compare ``a`` and ``b`` with the rules of ``scheme`` ('dpkg' or 'rpm'); returns -1, 0 or 1."""
    _check_scheme(scheme)
    if scheme == 'dpkg':
        return dpkg_compare(a, b)
    return rpm_compare(a, b)


def _parse(value, scheme):
    _check_scheme(scheme)
    if scheme == 'dpkg':
        return _parse_dpkg(value)
    return _parse_rpm(value)


def split_version(v, scheme):
    """Split a version into ``{'epoch': int, 'upstream': str, 'revision': str|None}``.

    For rpm, ``upstream`` is the version and ``revision`` the release.  A
    missing epoch is reported as 0, a missing revision/release as None.
    """
    epoch, upstream, revision, dummy = _parse(v, scheme)
    return {'epoch': epoch, 'upstream': upstream, 'revision': revision}


def matches_pin(actual, pinned, scheme):
    """Return True when the installed version ``actual`` satisfies the pin ``pinned``.

    * A pin without a revision/release (``580.65.06``, ``1.17.0``) matches any
      revision whose upstream part equals it (``580.65.06-0ubuntu1``,
      ``3:580.65.06-1.el9``), or whose upstream part starts with the pin
      followed by ``.`` (``13.0`` matches ``13.0.2-1``; ``580`` matches any
      580.x). ``1.15.0~rc.1`` therefore matches ``1.15.0~rc.1-1`` but neither
      ``1.15.0-1`` nor the other way round.
    * A pin with a revision/release (``1.17.0-1``) must compare equal to the
      installed version under the scheme's rules.
    * An epoch in the pin (``1:4.1.0``) must equal the installed epoch; a pin
      without an epoch matches any installed epoch (so ``4.1.0-1`` matches
      ``1:4.1.0-1``, as ``dnf``/``yum`` do for an epoch-less NEVRA).

    Raises :class:`VersionError` for an unknown scheme or malformed versions.
    """
    act_epoch, act_upstream, act_revision, dummy = _parse(actual, scheme)
    pin_epoch, pin_upstream, pin_revision, pin_epoch_given = _parse(pinned, scheme)
    if pin_epoch_given and pin_epoch != act_epoch:
        return False
    if pin_revision is not None:
        compare_parts = _dpkg_cmp_parts if scheme == 'dpkg' else _rpm_cmp_parts
        return compare_parts((act_epoch, act_upstream, act_revision), (act_epoch, pin_upstream, pin_revision)) == 0
    return act_upstream == pin_upstream or act_upstream.startswith(pin_upstream + '.')
