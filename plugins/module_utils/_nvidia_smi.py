# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers for nvidia-smi output and NVIDIA driver failure texts.

Pure functions, standard library only (no Ansible imports), Python 3.8+:

* ``parse_xml(text)`` reads an ``nvidia-smi -q -x`` document (DTD v11, v12, v13 and later);
* ``classify_failure(rc, stdout, stderr)`` names the reason an nvidia-smi run failed;
* ``find_kernel_gpu_errors(text)`` picks NVRM error reports out of dmesg, kmsg or syslog text;
* ``parse_proc_driver_version(text)`` reads the kernel module version from ``/proc/driver/nvidia/version``;
* ``parse_kernel_module_flavor(text)`` reads from the same banner whether that module is the open or the proprietary one.

The XML layout changes between drivers and GPUs (``power_readings`` became ``gpu_power_readings``,
ECC counters moved from ``single_bit``/``double_bit`` to ``sram_*``/``dram_*``, ``remapped_rows`` is
either the text ``N/A`` or a sub-tree, ``fabric`` keeps growing).  The parser therefore looks every
value up by name, ignores elements it does not know, and returns ``None`` for anything missing or
printed as "not available".
"""

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._command import escape_controls, signal_name, to_text

SCHEMA_VERSION = 1

# Values nvidia-smi prints instead of a reading; compared case-insensitively after stripping.
_NOT_AVAILABLE = frozenset(value.lower() for value in (
    '',
    'N/A',
    '[N/A]',
    'Not Available',
    'Not Supported',
    '[Not Supported]',
    'Unknown Error',
    '[Unknown Error]',
    'Requested functionality has been deprecated',
    '[Requested functionality has been deprecated]',
))

_TRUE = frozenset(('yes', 'true'))
_FALSE = frozenset(('no', 'false'))

_INT_RE = re.compile(r'\s*([-+]?\d+)(?![\d.])')
_FLOAT_RE = re.compile(r'\s*([-+]?\d+(?:\.\d+)?)')
_HEX_ID_RE = re.compile(r'(?:0[xX])?([0-9a-fA-F]+)$')
_ENTITY_RE = re.compile(r'<!ENTITY', re.IGNORECASE)
_DOCTYPE_RE = re.compile(r'<!DOCTYPE', re.IGNORECASE)
# The one document type declaration nvidia-smi prints: a bare DTD file name, no internal subset.
_NVSMI_DOCTYPE_RE = re.compile(r'<!DOCTYPE[ \t\r\n]+nvidia_smi_log[ \t\r\n]+SYSTEM[ \t\r\n]+"nvsmi_device_v[0-9]{1,3}\.dtd"[ \t\r\n]*>')
# A real document is a few kB per GPU (about 90 kB for two GPUs with every section); far more is not nvidia-smi's.
XML_MAX_CHARS = 16 * 1024 * 1024
_XML_START_RE = re.compile(r'<\?xml|<!DOCTYPE|<nvidia_smi_log[\s>/]')
_ROOT_TAG = 'nvidia_smi_log'
_ROOT_END = '</nvidia_smi_log>'


class NvidiaSmiParseError(ValueError):
    """The text is not a well-formed ``nvidia-smi -q -x`` document."""


# --------------------------------------------------------------------------- value helpers

def _clean(text):
    """Return stripped text, or None for None, empty text and "not available" markers."""
    if text is None:
        return None
    text = text.strip()
    if text.lower() in _NOT_AVAILABLE:
        return None
    return text


def _text(elem, path):
    """Cleaned text of the first element at ``path`` below ``elem`` (None when absent)."""
    if elem is None:
        return None
    found = elem.find(path)
    if found is None:
        return None
    return _clean(found.text)


def _first_text(elem, paths):
    """Cleaned text of the first of ``paths`` that has a value."""
    for path in paths:
        value = _text(elem, path)
        if value is not None:
            return value
    return None


def _to_int(value):
    """Integer from text such as ``34 C`` or ``81920 MiB``; None when there is no integer."""
    if value is None:
        return None
    match = _INT_RE.match(value)
    if match is None:
        return None
    return int(match.group(1))


def _to_float(value):
    """Float from text such as ``300.00 W``; None when there is no number."""
    if value is None:
        return None
    match = _FLOAT_RE.match(value)
    if match is None:
        return None
    return float(match.group(1))


def _to_bool(value):
    """True/False from ``Yes``/``No`` (or ``True``/``False``); None otherwise."""
    if value is None:
        return None
    value = value.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return None


def _sum(values):
    """Sum of the integers in ``values`` ignoring None; None when every value is None."""
    numbers = [value for value in values if value is not None]
    if not numbers:
        return None
    return sum(numbers)


def _pci_device_id(value):
    """``20B210DE`` (XML) or ``0x20B210DE`` (text output) -> ``0x20B210DE``."""
    if value is None:
        return None
    match = _HEX_ID_RE.match(value)
    if match is None:
        return value
    return '0x' + match.group(1).upper()


# --------------------------------------------------------------------------- document level

def _decode(text):
    if not isinstance(text, (str, bytes, bytearray)):
        raise NvidiaSmiParseError('nvidia-smi XML must be str or bytes, not %s' % type(text).__name__)
    return to_text(text).lstrip('\ufeff')


def _refuse_dtd(text):
    """Refuse what could make the XML parser expand entities or read other files, before it sees the document.

    nvidia-smi declares no entity and prints one fixed ``<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vNN.dtd">``;
    any entity declaration (entity expansion, "billion laughs") and any other document type declaration (an internal
    subset, a ``SYSTEM``/``PUBLIC`` identifier naming another file or URL: external entities) is refused.
    """
    if _ENTITY_RE.search(text):
        raise NvidiaSmiParseError('document declares XML entities (<!ENTITY>); nvidia-smi never does, refusing to parse it')
    for match in _DOCTYPE_RE.finditer(text):
        if not _NVSMI_DOCTYPE_RE.match(text, match.start()):
            declaration = text[match.start():match.start() + 120].split('>', 1)[0]
            raise NvidiaSmiParseError('document type declaration %r is not nvidia-smi\'s (<!DOCTYPE nvidia_smi_log SYSTEM '
                                      '"nvsmi_device_vNN.dtd">); refusing a DTD that could declare entities or name an external '
                                      'file' % escape_controls(declaration, keep_newlines=False))
    if len(_DOCTYPE_RE.findall(text)) > 1:
        raise NvidiaSmiParseError('document has more than one document type declaration; refusing to parse it')


def _parse_root(text):
    """Parse the document and return its ``nvidia_smi_log`` root element."""
    text = _decode(text)
    if len(text) > XML_MAX_CHARS:
        raise NvidiaSmiParseError('document is %d characters long; an nvidia-smi -q -x document has at most %d, refusing to parse it'
                                  % (len(text), XML_MAX_CHARS))
    if not text.strip():
        raise NvidiaSmiParseError('empty document: nvidia-smi printed no XML')
    _refuse_dtd(text)
    # Tolerate a stray line (a warning) printed before the XML declaration or after the root element.
    stripped = text.lstrip()
    if not stripped.startswith('<'):
        match = _XML_START_RE.search(text)
        if match is None:
            first_line = stripped.splitlines()[0][:200]
            raise NvidiaSmiParseError('not an nvidia-smi XML document; output starts with %r' % first_line)
        text = text[match.start():]
    end = text.rfind(_ROOT_END)
    if end != -1:
        text = text[:end + len(_ROOT_END)]
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise NvidiaSmiParseError('malformed or truncated nvidia-smi XML: %s' % exc) from exc
    except (ValueError, LookupError) as exc:
        raise NvidiaSmiParseError('unreadable nvidia-smi XML: %s' % exc) from exc
    if root.tag != _ROOT_TAG:
        raise NvidiaSmiParseError('root element is <%s>, expected <%s>: not an nvidia-smi -q -x document' % (root.tag, _ROOT_TAG))
    return root


def parse_xml(text):
    """Parse ``nvidia-smi -q -x`` output (str or bytes).

    Returns a dict with the keys ``timestamp``, ``driver_version``, ``cuda_driver_version``,
    ``attached_gpus``, ``gpu_count`` and ``gpus`` (one dict per ``<gpu>`` element, in document
    order; see ``_parse_gpu``).  Raises ``NvidiaSmiParseError`` for empty, malformed or truncated
    input and for XML whose root is not ``<nvidia_smi_log>``.
    """
    root = _parse_root(text)
    gpus = [_parse_gpu(index, elem) for index, elem in enumerate(root.findall('gpu'))]
    cuda = _text(root, 'cuda_version')
    if cuda is not None and cuda.lower() == 'not found':
        cuda = None
    return {
        'timestamp': _text(root, 'timestamp'),
        'driver_version': _text(root, 'driver_version'),
        'cuda_driver_version': cuda,
        'attached_gpus': _to_int(_text(root, 'attached_gpus')),
        'gpu_count': len(gpus),
        'gpus': gpus,
    }


# --------------------------------------------------------------------------- one GPU

def _current_pending(elem, current, pending):
    return {'current': _text(elem, current), 'pending': _text(elem, pending)}


def _driver_model(gpu):
    """``{'current', 'pending'}`` (WDDM/TCC on Windows); None when absent or all N/A (Linux)."""
    value = _current_pending(gpu.find('driver_model'), 'current_dm', 'pending_dm')
    if value['current'] is None and value['pending'] is None:
        return None
    return value


def _ecc_scope(scope):
    """Corrected/uncorrected totals of one ``ecc_errors/volatile`` or ``ecc_errors/aggregate`` element."""
    if scope is None:
        return {'corrected': None, 'uncorrected': None}
    if scope.find('single_bit') is not None or scope.find('double_bit') is not None:
        # Old layout (Kepler..Pascal era): single_bit/double_bit with per-unit counters and a total.
        return {
            'corrected': _ecc_bit_total(scope.find('single_bit')),
            'uncorrected': _ecc_bit_total(scope.find('double_bit')),
        }
    # New layout: sram_correctable, sram_uncorrectable (or its _parity/_secded split), dram_*.
    sram_uncorrected = _to_int(_text(scope, 'sram_uncorrectable'))
    if sram_uncorrected is None:
        sram_uncorrected = _sum([_to_int(_text(scope, 'sram_uncorrectable_parity')),
                                 _to_int(_text(scope, 'sram_uncorrectable_secded'))])
    return {
        'corrected': _sum([_to_int(_text(scope, 'sram_correctable')), _to_int(_text(scope, 'dram_correctable'))]),
        'uncorrected': _sum([sram_uncorrected, _to_int(_text(scope, 'dram_uncorrectable'))]),
    }


def _ecc_bit_total(bits):
    """``single_bit``/``double_bit`` total, or the sum of its counters when the total is missing."""
    if bits is None:
        return None
    total = _to_int(_text(bits, 'total'))
    if total is not None:
        return total
    return _sum([_to_int(_clean(child.text)) for child in bits if child.tag != 'total'])


def _ecc_errors(gpu):
    errors = gpu.find('ecc_errors')
    if errors is None:
        return {'volatile': _ecc_scope(None), 'aggregate': _ecc_scope(None)}
    return {'volatile': _ecc_scope(errors.find('volatile')), 'aggregate': _ecc_scope(errors.find('aggregate'))}


def _retired_pages(gpu):
    pages = gpu.find('retired_pages')
    return {
        'single_bit': _to_int(_text(pages, 'multiple_single_bit_retirement/retired_count')),
        'double_bit': _to_int(_text(pages, 'double_bit_retirement/retired_count')),
        'pending': _to_bool(_first_text(pages, ('pending_retirement', 'pending_blacklist'))),
    }


def _remapped_rows(gpu):
    """Row-remapping counters; None when the element is absent or just the text ``N/A``."""
    rows = gpu.find('remapped_rows')
    if rows is None or len(rows) == 0:
        return None
    return {
        'correctable': _to_int(_text(rows, 'remapped_row_corr')),
        'uncorrectable': _to_int(_text(rows, 'remapped_row_unc')),
        'pending': _to_bool(_text(rows, 'remapped_row_pending')),
        'failure': _to_bool(_text(rows, 'remapped_row_failure')),
    }


def _fabric(gpu):
    """NVLink fabric state (``state``/``status``; ``cliqueId``/``clusterUuid``/``health`` on 550+)."""
    fabric = gpu.find('fabric')
    if fabric is None:
        return None
    health = fabric.find('health')
    return {
        'state': _text(fabric, 'state'),
        'status': _text(fabric, 'status'),
        'clique_id': _first_text(fabric, ('cliqueId', 'clique_id')),
        'cluster_uuid': _first_text(fabric, ('clusterUuid', 'cluster_uuid')),
        'health': None if health is None else {child.tag: _clean(child.text) for child in health},
    }


def _power_limit(gpu):
    """Enforced power limit in W: ``gpu_power_readings/current_power_limit`` (535+) or ``power_readings/enforced_power_limit``."""
    for section in ('gpu_power_readings', 'power_readings'):
        value = _first_text(gpu.find(section), ('current_power_limit', 'enforced_power_limit', 'power_limit'))
        if value is not None:
            return _to_float(value)
    return None


def _parse_gpu(index, gpu):
    """One ``<gpu>`` element as a flat-ish dict (every key always present)."""
    pci_bus_id = _text(gpu, 'pci/pci_bus_id') or _clean(gpu.get('id'))
    mig_devices = gpu.find('mig_devices')
    return {
        'index': index,
        'minor_number': _to_int(_text(gpu, 'minor_number')),
        'id': _clean(gpu.get('id')) or pci_bus_id,
        'name': _text(gpu, 'product_name'),
        'brand': _text(gpu, 'product_brand'),
        'architecture': _text(gpu, 'product_architecture'),
        'uuid': _text(gpu, 'uuid'),
        'serial': _text(gpu, 'serial'),
        'pci_bus_id': pci_bus_id,
        'pci_device_id': _pci_device_id(_text(gpu, 'pci/pci_device_id')),
        'vbios_version': _text(gpu, 'vbios_version'),
        'gsp_firmware_version': _text(gpu, 'gsp_firmware_version'),
        'board_part_number': _text(gpu, 'board_part_number'),
        'board_id': _text(gpu, 'board_id'),
        'persistence_mode': _text(gpu, 'persistence_mode'),
        'driver_model': _driver_model(gpu),
        'mig_mode': _current_pending(gpu.find('mig_mode'), 'current_mig', 'pending_mig'),
        'mig_device_count': 0 if mig_devices is None else len(mig_devices.findall('mig_device')),
        'ecc_mode': _current_pending(gpu.find('ecc_mode'), 'current_ecc', 'pending_ecc'),
        'ecc_errors': _ecc_errors(gpu),
        'retired_pages': _retired_pages(gpu),
        'remapped_rows': _remapped_rows(gpu),
        'fabric': _fabric(gpu),
        'temperature_c': _to_int(_text(gpu, 'temperature/gpu_temp')),
        'power_limit_w': _power_limit(gpu),
        'memory_total_mib': _to_int(_text(gpu, 'fb_memory_usage/total')),
    }


# --------------------------------------------------------------------------- failed runs

_MISMATCH_RE = re.compile(r'Driver/library version mismatch', re.IGNORECASE)
_NVML_VERSION_RE = re.compile(r'NVML library version:\s*(\d+(?:\.\d+)*)', re.IGNORECASE)
_UNREACHABLE_RE = re.compile(
    r"could(?:n['\u2019]?t| not) communicate with the NVIDIA driver|NVML: Driver Not Loaded", re.IGNORECASE)
_GPU_LOST_RE = re.compile(
    r'GPU is lost|fallen off the bus|Unable to determine the device handle for GPU.*Unknown Error', re.IGNORECASE)
_NO_DEVICES_RE = re.compile(r'No devices were found', re.IGNORECASE)

# Checked in this order: the most specific diagnosis wins.
_FAILURE_PATTERNS = (
    ('driver_library_mismatch', _MISMATCH_RE),
    ('driver_unreachable', _UNREACHABLE_RE),
    ('gpu_lost', _GPU_LOST_RE),
    ('no_devices', _NO_DEVICES_RE),
)


def _output_lines(*outputs):
    lines = []
    for output in outputs:
        if output is None:
            continue
        for line in to_text(output).splitlines():
            line = line.strip()
            if line:
                lines.append(line)
    return lines


def classify_failure(rc, stdout, stderr):
    """Classify a failed (or suspicious) nvidia-smi run.

    Returns ``{'reason', 'message', 'nvml_library_version'}``.  ``reason`` is one of
    ``driver_library_mismatch``, ``driver_unreachable``, ``gpu_lost``, ``no_devices`` or
    ``nvidia_smi_failed``; ``message`` is the tool's own lines that led to the reason (all
    output lines for ``nvidia_smi_failed``); ``nvml_library_version`` is the userspace version
    that newer drivers print after a version mismatch (``NVML library version: 570.124``).
    """
    lines = _output_lines(stdout, stderr)
    nvml_version = None
    for line in lines:
        match = _NVML_VERSION_RE.search(line)
        if match:
            nvml_version = match.group(1)
            break
    for reason, pattern in _FAILURE_PATTERNS:
        matched = [line for line in lines if pattern.search(line)]
        if matched:
            if reason == 'driver_library_mismatch':
                matched = [line for line in lines if pattern.search(line) or _NVML_VERSION_RE.search(line)]
            return {'reason': reason, 'message': '\n'.join(matched), 'nvml_library_version': nvml_version}
    message = '\n'.join(lines) if lines else 'nvidia-smi exited with return code %s and printed nothing' % rc
    killed = signal_name(rc)
    if killed:
        message = 'nvidia-smi was killed by %s%s' % (killed, ': ' + message if lines else ' and printed nothing')
    return {'reason': 'nvidia_smi_failed', 'message': message, 'nvml_library_version': nvml_version}


# --------------------------------------------------------------------------- kernel log

_PCI = r'(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?'
_XID_RE = re.compile(r'NVRM: Xid \((?:PCI:)?(' + _PCI + r')\): (\d+)')
_NVIDIA_GPU_RE = re.compile(r'NVIDIA GPU (' + _PCI + r')')
_GPU_PCI_RE = re.compile(r'\bGPU (' + _PCI + r')')
_FALLEN_RE = re.compile(r'fallen off the bus', re.IGNORECASE)
_NOT_SUPPORTED_RE = re.compile(r'is not supported by the', re.IGNORECASE)
_RM_INIT_RE = re.compile(r'RmInitAdapter failed|rm_init_adapter failed', re.IGNORECASE)
# A multi-line NVRM report names the GPU at most this many lines before its key phrase.
_LOOKBACK = 3


def _report_start(lines, index):
    """First line and PCI address of the report whose key phrase is on line ``index``.

    Multi-line reports open with ``The NVIDIA GPU <pci>`` a few lines earlier; single-line ones
    name the GPU on the same line (``NVRM: GPU <pci>: ...``).
    """
    for start in range(index, max(-1, index - _LOOKBACK - 1), -1):
        match = _NVIDIA_GPU_RE.search(lines[start])
        if match:
            return start, match.group(1)
    match = _GPU_PCI_RE.search(lines[index])
    return index, match.group(1) if match else None


def find_kernel_gpu_errors(text):
    """Find NVIDIA GPU error reports in kernel log text (dmesg, /dev/kmsg, syslog, journal).

    Returns a list of ``{'kind', 'pci', 'xid', 'line'}`` in log order, ``kind`` being ``xid``,
    ``fallen_off_bus``, ``rm_init_adapter_failed`` or ``gpu_not_supported``.  ``pci`` is the
    address as the kernel printed it (Xid lines omit the PCI function), ``xid`` the Xid number
    (None for other kinds) and ``line`` the stripped log line(s) of the report, joined by
    newlines when the driver split the message over several lines.  Invalid UTF-8 and control
    characters in a (corrupted) line are escaped as ``\\xNN``.
    """
    lines = [escape_controls(line.strip()) for line in to_text(text).splitlines()]
    found = []
    for index, line in enumerate(lines):
        xid = _XID_RE.search(line)
        if xid:
            found.append({'kind': 'xid', 'pci': xid.group(1), 'xid': int(xid.group(2)), 'line': line})
        elif _FALLEN_RE.search(line):
            start, pci = _report_start(lines, index)
            found.append({'kind': 'fallen_off_bus', 'pci': pci, 'xid': None, 'line': '\n'.join(lines[start:index + 1])})
        elif _NOT_SUPPORTED_RE.search(line):
            start, pci = _report_start(lines, index)
            end = index + 1
            if end < len(lines) and 'driver release' in lines[end]:
                end += 1
            found.append({'kind': 'gpu_not_supported', 'pci': pci, 'xid': None, 'line': '\n'.join(lines[start:end])})
        elif _RM_INIT_RE.search(line):
            match = _GPU_PCI_RE.search(line)
            found.append({'kind': 'rm_init_adapter_failed', 'pci': match.group(1) if match else None, 'xid': None, 'line': line})
    return found


# --------------------------------------------------------------------------- /proc

_PROC_VERSION_RE = re.compile(r'Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)')


def parse_proc_driver_version(text):
    """Kernel module version from ``/proc/driver/nvidia/version``.

    Handles the proprietary form ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue ...``
    and the open form ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build ...``.
    Returns None when no version is found.
    """
    text = to_text(text)
    if not text:
        return None
    match = _PROC_VERSION_RE.search(text)
    return match.group(1) if match else None


# The banner's first line names the module's flavor and the architecture it was built for (real banners:
# tests/unit/fixtures/real-outputs/proc, h100-device, h200-device; the aarch64 forms from Grace systems).
_KERNEL_ARCHES = r'(?:x86_64|aarch64|ppc64le)'
_FLAVOR_RES = (
    ('open', re.compile(r'^NVRM version: NVIDIA UNIX Open Kernel Module for %s\s+\d' % _KERNEL_ARCHES)),
    ('proprietary', re.compile(r'^NVRM version: NVIDIA UNIX %s Kernel Module\s+\d' % _KERNEL_ARCHES)),
)


def parse_kernel_module_flavor(text):
    """``open`` or ``proprietary``: the flavor of the loaded module, from the first line of ``/proc/driver/nvidia/version``.

    ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ...`` is the open module (``nvidia-open``,
    ``nvidia-kernel-open-dkms``, ``kmod-nvidia-open-dkms``), ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05 ...``
    the proprietary one; likewise for aarch64 and ppc64le.  None when there is no banner or it reads otherwise (never guessed).
    """
    lines = to_text(text).splitlines()
    if not lines:
        return None
    for flavor, pattern in _FLAVOR_RES:
        if pattern.match(lines[0]):
            return flavor
    return None
