# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake nccl-tests ``all_reduce_perf`` of a simulated node, and its installer.

    python3 -m gpufleet_sim.nccl_tests install | remove   # put /usr/local/bin/all_reduce_perf in place / take it away
    python3 -m gpufleet_sim.nccl_tests run ARGS            # what /usr/local/bin/all_reduce_perf runs

nccl-tests is built from source on real fleets (``make`` in a clone of NVIDIA/nccl-tests, then the
``build/all_reduce_perf`` binary copied onto the node); NVIDIA's apt repository has no package for it,
so the simulated fleet installs it per node (``tests/sim/fleet nccl-tests NODE...``), not from a dummy package.

The output is nccl-tests 2.17.6 built against NCCL 2.25.1, line for line the format of the real run in
``tests/unit/fixtures/real-outputs/nccl-tests/all_reduce_perf_nccl2.25.1_nccl-tests2.17.6_*`` (the one
single-node sample of that version); the printf formats are those of NVIDIA/nccl-tests ``src/util.cu``
(``writeDeviceReport``, ``writeBenchmarkLine*``, ``writeResultHeader`` with ``tsPad``, ``writeResultFooter``,
``writeErrors``) and ``src/common.h`` (``CUDACHECK``, ``NCCLCHECK``, ``TESTCHECK``).  A single process drives
every GPU (``-g``), so every rank has the same pid.  Honoured: ``-t -g -b -e -i -f -n -m -w -c -d -o`` (and their
long forms), ``NCCL_TESTS_MIN_BW`` and ``NCCL_TESTS_DEVICE``; other nccl-tests options are accepted and ignored.

What it reports comes from the node's state:

* the GPUs of ``hardware.json`` (less the ones the boot did not find): name, PCI address, memory (the real
  "Reducing maxBytes ... due to memory limitation" when ``-e`` does not fit); more GPUs asked for than found:
  the real "Invalid number of GPUs" error (exit 5);
* no driver loaded, NVML missing or a driver/library mismatch: the CUDA error the runtime gives there (exit 2);
* bus bandwidth: a saturation curve towards the profile's single-node NVLink/PCIe figure (:data:`PEAK_BUSBW`),
  deterministic per node and size; fault ``nccl_slow`` (``busbw``, ``branch``) caps it;
* fault ``nccl_fail`` (``error``, ``branch``): the communicator set-up fails with NCCL's own error string (exit 3).
"""

import getopt
import hashlib
import os
import socket
import sys

from gpufleet_sim import fault_table, state

PROGRAM = 'all_reduce_perf'
INSTALL_PATH = 'usr/local/bin/all_reduce_perf'
WRAPPER = ('#!/bin/sh\n# nccl-tests all_reduce_perf (gpufleet-sim fake, see gpufleet_sim/nccl_tests.py)\n'
           'PYTHONPATH=/usr/lib/gpufleet-sim exec python3 -m gpufleet_sim.nccl_tests run "$@"\n')
NCCL_TESTS_VERSION = '2.17.6'
NCCL_VERSION_CODE = 22501   # NCCL 2.25.1, headers and library
# Lines of NVIDIA/nccl-tests v2.17.6 the failure messages name (__FILE__:__LINE__).
LINE_DEVICE_COUNT = ('util.cu', 553)        # CUDACHECK(cudaGetDeviceCount(&available_devices))
LINE_COMM_INIT = ('common.cu', 1279)        # NCCLCHECK(ncclGroupEnd()) after ncclCommInitRankConfig
LINE_MAIN = ('common.cu', 1100)             # TESTCHECK(result) in main()
# testResult_t
TEST_CUDA_ERROR, TEST_NCCL_ERROR, TEST_NOT_IMPLEMENTED, TEST_NUM_RESULTS = 2, 3, 5, 6

# Average bus bandwidth (GB/s) a healthy node of the profile reaches at large sizes, single node, all GPUs.
PEAK_BUSBW = {'h100-sxm-8': 480.0, 'a100-sxm-8': 235.0, 'l40s-pcie-4': 22.0}
DEFAULT_PEAK = 100.0
# Size (bytes) at which half the peak is reached.
HALF_SIZE = 32 * 1024 * 1024

# ncclGetErrorString() of NCCL >= 2.13 (src/init.cc), by the nccl_fail fault's ``error`` setting.
NCCL_ERRORS = {
    'cuda': 'unhandled cuda error (run with NCCL_DEBUG=INFO for details)',
    'system': 'unhandled system error (run with NCCL_DEBUG=INFO for details)',
    'internal': 'internal error - please report this issue to the NCCL developers',
    'invalid_argument': 'invalid argument (run with NCCL_DEBUG=WARN for details)',
    'invalid_usage': 'invalid usage (run with NCCL_DEBUG=WARN for details)',
    'remote': 'remote process exited or there was a network error',
}
# cudaGetErrorString() for the node states without a usable driver.
CUDA_ERRORS = {
    'no_library': 'CUDA driver version is insufficient for CUDA runtime version',
    'not_loaded': 'no CUDA-capable device is detected',
    'mismatch': 'system has unsupported display driver / cuda driver combination',
}
TYPES = {'int8': 1, 'char': 1, 'uint8': 1, 'int32': 4, 'int': 4, 'uint32': 4, 'int64': 8, 'uint64': 8,
         'half': 2, 'float16': 2, 'float': 4, 'float32': 4, 'double': 8, 'float64': 8, 'bfloat16': 2}
TYPE_NAMES = {'char': 'int8', 'int': 'int32', 'float16': 'half', 'float32': 'float', 'float64': 'double'}
OPS = ('sum', 'prod', 'max', 'min', 'avg', 'mulsum')

SHORT_OPTIONS = 't:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:'
LONG_OPTIONS = ['nthreads=', 'ngpus=', 'minbytes=', 'maxbytes=', 'stepbytes=', 'stepfactor=', 'iters=', 'agg_iters=',
                'warmup_iters=', 'run_cycles=', 'parallel_init=', 'check=', 'op=', 'datatype=', 'root=', 'blocking=',
                'stream_null=', 'timeout=', 'cudagraph=', 'report_cputime=', 'report_timestamps=', 'output_file=',
                'average=', 'local_register=', 'cta_policy=', 'device_implementation=', 'device_cta_count=', 'help']
LONG_TO_SHORT = {'nthreads': 't', 'ngpus': 'g', 'minbytes': 'b', 'maxbytes': 'e', 'stepbytes': 'i', 'stepfactor': 'f',
                 'iters': 'n', 'agg_iters': 'm', 'warmup_iters': 'w', 'check': 'c', 'op': 'o', 'datatype': 'd',
                 'cudagraph': 'G', 'help': 'h'}


class Exit(Exception):
    """Leave ``run`` with this exit status (the output so far is printed)."""


def parse_size(value):
    """nccl-tests' ``parsesize``: ``8M`` -> 8388608, ``1G``, ``512K``, ``64``; None when invalid."""
    text = (value or '').strip()
    units = 1
    if text and text[-1] in 'GgMmKk':
        units = {'g': 1 << 30, 'm': 1 << 20, 'k': 1 << 10}[text[-1].lower()]
        text = text[:-1].strip()
    try:
        number = float(text)
    except ValueError:
        return None
    return int(number * units)


def c_long(value, default=0):
    """``strtol(optarg, NULL, 0)``: decimal, 0x hex or 0 octal prefix; the leading number only."""
    text = (value or '').strip()
    sign = -1 if text.startswith('-') else 1
    text = text.lstrip('+-')
    base, digits = 10, '0123456789'
    if text[:2].lower() == '0x':
        base, digits, text = 16, '0123456789abcdefABCDEF', text[2:]
    elif text[:1] == '0' and len(text) > 1:
        base, digits = 8, '01234567'
    prefix = ''
    for character in text:
        if character not in digits:
            break
        prefix += character
    return sign * int(prefix, base) if prefix else default


def float_str(value, width):
    """nccl-tests' ``getFloatStr``: two decimals while they fit in ``width``, then fewer, then an exponent."""
    power = 0
    limit = 1
    while value >= limit:
        power += 1
        limit *= 10
    if power < width - 2:
        return '%*.2f' % (width, value)
    if power < width - 1:
        return '%*.1f' % (width, value)
    if power < width + 1:
        return '%*.0f' % (width, value)
    return '%*.1e' % (width, value)


def c_g(value):
    """printf ``%g``."""
    return '%g' % value


def fault_applies(settings, driver):
    """A fault set with ``branch`` applies only while a driver of that branch is loaded."""
    if settings is None:
        return False
    branch = settings.get('branch')
    return branch in (None, '') or state.branch_of(driver) == int(branch)


def busbw(peak, size, node, gpu_salt):
    """Bus bandwidth (GB/s) at ``size`` bytes: the saturation curve, less up to 0.4 % of deterministic noise."""
    digest = hashlib.sha256(('%s/%d/%s' % (node, size, gpu_salt)).encode('utf-8')).digest()
    return peak * size / float(size + HALF_SIZE) * (1.0 - digest[0] / 255.0 * 0.004)


class Options(object):
    """The command line as nccl-tests reads it (defaults of src/common.cu)."""

    def __init__(self):
        self.threads = 1
        self.gpus = 1
        self.min_bytes = 32 * 1024 * 1024
        self.max_bytes = 32 * 1024 * 1024
        self.step_bytes = 1024 * 1024
        self.step_factor = 1
        self.iters = 20
        self.agg_iters = 1
        self.warmup = 1
        self.check = 1
        self.graph = 0
        self.op = 'sum'
        self.type = 'float'


def parse_arguments(argv, out, err):
    """Options, or raise Exit with the status nccl-tests exits with on a bad command line."""
    options = Options()
    try:
        pairs, dummy = getopt.gnu_getopt(argv, SHORT_OPTIONS, LONG_OPTIONS)
    except getopt.GetoptError as exc:
        err.write('%s: %s\n' % (PROGRAM, exc))
        out.write("invalid option '?'\n")
        raise Exit(0)
    for flag, value in pairs:
        key = LONG_TO_SHORT.get(flag[2:], flag[2:]) if flag.startswith('--') else flag[1:]
        if key in ('b', 'e', 'i'):
            parsed = parse_size(value)
            if parsed is None:
                err.write("invalid size specified for '%s'\n" % {'b': 'minbytes', 'e': 'maxbytes', 'i': 'stepBytes'}[key])
                raise Exit(255)
            setattr(options, {'b': 'min_bytes', 'e': 'max_bytes', 'i': 'step_bytes'}[key], parsed)
        elif key in ('t', 'g', 'f', 'n', 'm', 'w', 'c', 'G'):
            setattr(options, {'t': 'threads', 'g': 'gpus', 'f': 'step_factor', 'n': 'iters', 'm': 'agg_iters', 'w': 'warmup',
                              'c': 'check', 'G': 'graph'}[key], c_long(value))
        elif key == 'o':
            options.op = value if value in OPS else 'sum'
        elif key == 'd':
            options.type = TYPE_NAMES.get(value, value) if value in TYPES else 'float'
        elif key == 'h':
            out.write('USAGE: %s \n\t[-t,--nthreads <num threads>] \n\t[-g,--ngpus <gpus per thread>] \n\t'
                      '[-b,--minbytes <min size in bytes>] \n\t[-e,--maxbytes <max size in bytes>] \n\t'
                      '[-i,--stepbytes <increment size>] \n\t[-f,--stepfactor <increment factor>] \n\t'
                      '[-h,--help]\n' % PROGRAM)
            raise Exit(0)
    if options.min_bytes > options.max_bytes:
        err.write("invalid sizes for 'minbytes' and 'maxbytes': %d > %d\n" % (options.min_bytes, options.max_bytes))
        raise Exit(255)
    return options


def sizes(options):
    """The message sizes of the run, as nccl-tests steps through them (at most 64 rows here)."""
    size = options.min_bytes
    result = []
    while size <= options.max_bytes and len(result) < 64:
        result.append(size)
        following = size * options.step_factor if options.step_factor > 1 else size + options.step_bytes
        if following <= size:
            break
        size = following
    return result


def run(argv, out=None, err=None, environ=None):
    """Print a run of all_reduce_perf; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    environ = os.environ if environ is None else environ
    hostname = socket.gethostname()
    pid = os.getpid()

    def fail_main(status):
        out.write(' .. %s pid %d: Test failure %s:%d\n' % ((hostname, pid) + LINE_MAIN))
        return status

    try:
        options = parse_arguments(argv, out, err)
    except Exit as exc:
        return exc.args[0]
    out.write('# nccl-tests version %s nccl-headers=%d nccl-library=%d\n' % (NCCL_TESTS_VERSION, NCCL_VERSION_CODE, NCCL_VERSION_CODE))
    out.write('# Collective test starting: %s\n' % PROGRAM)
    out.write('# nThread %d nGpus %d minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %d agg iters: %d '
              'validation: %d graph: %d\n' % (
                  options.threads, options.gpus, options.min_bytes, options.max_bytes,
                  options.step_factor if options.step_factor > 1 else options.step_bytes,
                  'factor' if options.step_factor > 1 else 'bytes', options.warmup, options.iters, options.agg_iters,
                  options.check, options.graph))
    out.write('#\n')
    out.write('# Using devices\n')
    nvml = state.nvml_state()
    if nvml != 'ok':
        out.write("%s: Test CUDA failure %s:%d '%s'\n" % ((hostname,) + LINE_DEVICE_COUNT + (CUDA_ERRORS[nvml],)))
        return fail_main(TEST_CUDA_ERROR)
    hardware = state.load_hardware()
    gpus = hardware.get('gpus') or []
    first = c_long(environ.get('NCCL_TESTS_DEVICE'), -1) if environ.get('NCCL_TESTS_DEVICE') else -1
    first = first if first != -1 else 0
    ranks = options.threads * options.gpus
    lines = []
    for index in range(ranks):
        device = first + index
        if device >= len(gpus):
            err.write('Invalid number of GPUs: %d requested but only %d were found.\n' % (first + ranks, len(gpus)))
            err.write('Please check the number of processes and GPUs per process.\n')
            return fail_main(TEST_NOT_IMPLEMENTED)
        gpu = gpus[device]
        domain, bus, rest = (gpu.get('pci_bus_id') or '0:0:0.0').split(':')
        lines.append('#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n' % (
            index, 0, pid, hostname, device, int(domain, 16), int(bus, 16), int(rest.split('.')[0], 16), gpu.get('model')))
    out.write(''.join(lines))
    memory = min(int(gpus[first + index].get('memory_mib') or 0) for index in range(ranks)) * 1024 * 1024
    gib = 1 << 30
    reserve = min(-(-memory // (16 * gib)) * gib, 4 * gib)
    fits = (memory - reserve - gib) // (3 if options.check else 2)
    if options.max_bytes > fits:
        options.max_bytes = max(fits, 0)
        options.min_bytes = min(options.min_bytes, options.max_bytes)
        out.write('#\n# Reducing maxBytes to %d due to memory limitation\n' % options.max_bytes)
    driver = state.loaded_driver()
    failure = state.fault('nccl_fail')
    if fault_applies(failure, driver):
        error = fault_table.default('nccl_fail', 'error')
        words = NCCL_ERRORS.get(str(failure.get('error') or error), NCCL_ERRORS[error])
        out.write("%s: Test NCCL failure %s:%d '%s / %s'\n" % ((hostname,) + LINE_COMM_INIT + (words, '')))
        return fail_main(TEST_NCCL_ERROR)
    peak = PEAK_BUSBW.get(hardware.get('profile'), DEFAULT_PEAK)
    slow = state.fault('nccl_slow')
    if fault_applies(slow, driver):
        peak = min(peak, float(slow.get('busbw') or peak / fault_table.NCCL_SLOW_DEFAULT_DIVISOR))
    word = TYPES[options.type]
    factor = 2.0 * (ranks - 1) / ranks if ranks > 1 else 1.0
    out.write('#\n')
    out.write('# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n' % ('', '', '', '', ''))
    out.write('# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s\n' % (
        'size', 'count', 'type', 'redop', 'root', 'time', 'algbw', 'busbw', '#wrong', 'time', 'algbw', 'busbw', '#wrong', ''))
    out.write('# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s\n' % (
        '(B)', '(elements)', '', '', '', '(us)', '(GB/s)', '(GB/s)', '', '(us)', '(GB/s)', '(GB/s)', '', ''))
    total = 0.0
    counted = 0
    for size in sizes(options):
        count = size // word
        nbytes = count * word
        row = '%12d  %12d  %8s  %6s  %6s' % (nbytes, count, options.type, options.op, '%6i' % -1)
        for in_place in (False, True):
            bus = busbw(peak, max(nbytes, 1), hardware.get('node') or hostname, in_place) if ranks > 1 else 0.0
            algbw = bus / factor if ranks > 1 else peak * nbytes / float(nbytes + HALF_SIZE)
            seconds = nbytes / (algbw * 1.0e9) if algbw else 0.0
            wrong = '%6g' % 0 if options.check else '   N/A'
            row += '  %7s  %6s  %6s  %s' % (float_str(seconds * 1.0e6, 7), float_str(nbytes / 1.0e9 / seconds if seconds else 0.0, 6),
                                            float_str(bus, 6), wrong)
            total += bus
            counted += 1
        out.write(row + '\n')
    average = total / counted if counted else 0.0
    minimum = environ.get('NCCL_TESTS_MIN_BW')
    check = float(minimum) if minimum else -1.0
    verdict = '' if check == -1.0 else ('FAILED' if average < check * 0.9 else 'OK')
    out.write('# Out of bounds values : %d %s\n' % (0, 'OK'))
    out.write('# Avg bus bandwidth    : %s %s\n' % (c_g(average), verdict))
    out.write('#\n')
    out.write('# Collective test concluded: %s\n' % PROGRAM)
    out.write('\n')
    if verdict == 'FAILED':
        return fail_main(TEST_NUM_RESULTS)
    return 0


def install():
    """Put ``/usr/local/bin/all_reduce_perf`` in place (as copying a build of nccl-tests onto the node does)."""
    if state.read_text(INSTALL_PATH) != WRAPPER:
        state.write_text(INSTALL_PATH, WRAPPER)
        os.chmod(state.path(INSTALL_PATH), 0o755)
        return True
    return False


def remove():
    return state.remove(INSTALL_PATH)


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.nccl_tests install|remove|run ARGS``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    action = argv[0] if argv else ''
    if action == 'install':
        print('installed' if install() else 'already installed')
        return 0
    if action == 'remove':
        print('removed' if remove() else 'not installed')
        return 0
    if action == 'run':
        try:
            return run(argv[1:])
        finally:
            sys.stdout.flush()
    sys.stderr.write('usage: python3 -m gpufleet_sim.nccl_tests install | remove | run [all_reduce_perf arguments]\n')
    return 2


if __name__ == '__main__':
    sys.exit(main())
