"""What a job does, I/O by I/O, whichever engine runs it: offsets, sizes and directions.

A job's I/O is numbered; a *pass* is as many I/Os as cover the region once
(fio's ``size``).  :meth:`IoPlan.pass_io` gives one pass as arrays -- absolute
offsets, sizes (or one size for all), directions, files -- and a job goes
round as many passes as its ``io_size``, ``loops`` or ``runtime`` ask for.  The
patterns follow fio's options:

* sequential I/O goes up the region (``rw=write:4k`` skips 4 KiB after each
  I/O, ``rw=read:-8k`` goes backwards), wrapping at the end;
* random I/O with fio's random map visits every block once per pass (a
  permutation); ``norandommap`` and the skewed distributions (zipf, pareto,
  normal, zoned) draw with replacement, ``random_generator=lfsr`` never
  repeats; ``rw=randread:8`` takes a new random offset every 8 I/Os, the
  others following it; ``percentage_random`` mixes random and sequential I/O;
* several block sizes (``bssplit``, ``bsrange``) are drawn by their shares;
  random offsets are then multiples of ``blockalign`` (the smallest size) and
  drawn with replacement (fio's map covers single-size jobs);
* ``zonemode=strided`` does ``zonesize`` bytes of each zone, then skips
  ``zoneskip`` bytes; several files (``nrfiles``) are served in turn, at random
  or one after another (``file_service_type``).

A pass over a big region (a whole card or disk in small blocks) is not held
at once: a single-size, single-file job whose pattern needs no memory of the
I/Os before (sequential, fio's random map, uniform draws) makes it in
windows of :data:`WINDOW_IOS` I/Os (:meth:`IoPlan.windows`); the random
map's order over such a region is then a keyed permutation computed per
window (:func:`permuted`).  Any other pattern is refused beyond
:data:`MAX_PASS_IOS` I/Os, before the run starts, rather than filling memory.

Both engines draw from the same seeds, so a job visits the same blocks in the
same order with the same data on a descriptor and on a generic block device.
"""
from __future__ import annotations

import array
import struct
import sys
from dataclasses import dataclass

import numpy as np

from ...errors import ConfigError
from ...records import MIB
from .jobs import JobConfig

#: run id, sequence: stamped at the start of every written block so no two are identical (dedupe)
SEQ_STAMP = struct.Struct("<QQ")
#: direction codes of the kinds arrays (1 = read, 0 = write as the engines have always had them; 2 = trim)
READ, WRITE, TRIM = 1, 0, 2
KIND_NAMES = {READ: "read", WRITE: "write", TRIM: "trim"}
#: I/Os generated at a time when a pass's size is found by drawing (several block sizes)
_DRAW_CHUNK = 1 << 16
#: I/Os of a pass made at a time when the pass is longer (8 MiB of offsets)
WINDOW_IOS = 1 << 20
#: the longest pass made whole (patterns that cannot be made in windows): about 64 MiB of offsets
MAX_PASS_IOS = 1 << 23


def permuted(n: int, key: tuple[int, ...], idx: np.ndarray) -> np.ndarray:
    """Entries ``idx`` of a permutation of ``range(n)`` chosen by ``key``, without making the whole permutation:
    a four-round Feistel network over the smallest even power of two >= n, walking the cycle until it lands
    below n (a bijection of range(n), whatever the key)."""
    half = max(1, ((max(n - 1, 1)).bit_length() + 1) // 2)
    mask = np.uint64((1 << half) - 1)
    keys = np.random.default_rng(list(key) + [0xFE15]).integers(0, 1 << 62, size=4, dtype=np.uint64)

    def rounds(x: np.ndarray) -> np.ndarray:
        left, right = x >> np.uint64(half), x & mask
        for k in keys:
            h = (right ^ k) * np.uint64(0x9E3779B97F4A7C15)  # splitmix64's mixer
            h ^= h >> np.uint64(31)
            h *= np.uint64(0xBF58476D1CE4E5B9)
            h ^= h >> np.uint64(29)
            left, right = right, left ^ (h & mask)
        return (left << np.uint64(half)) | right

    with np.errstate(over="ignore"):
        out = rounds(idx.astype(np.uint64))
        out_of_range = np.nonzero(out >= np.uint64(n))[0]
        while out_of_range.size:
            out[out_of_range] = rounds(out[out_of_range])
            out_of_range = out_of_range[out[out_of_range] >= np.uint64(n)]
    return out.astype(np.int64)


def pool_count(bs: int) -> int:
    """Write buffers per thread: a few distinct ones, at most 1 MiB together so they stay in the CPU cache
    (fio also reuses one buffer); writes are made unique by a stamp."""
    return max(1, min(8, MIB // bs))


def pool_seed(job: JobConfig, thread: int) -> int:
    """Seed of the random data in a thread's write buffers."""
    return (job.seed * 1_000_003 + thread) & 0xFFFFFFFF


def block_order(job: JobConfig, nblocks: int, loop: int) -> array.array | range:
    """Blocks in the order a loop visits them: in turn, or a random permutation (each block once)."""
    if not job.random:
        return range(nblocks)
    perm = np.random.default_rng([job.seed, loop, 0x0F10]).permutation(nblocks).astype(np.int64)
    a = array.array("q")
    a.frombytes(perm.tobytes())
    return a


def mix_kinds(rng: np.random.Generator, n: int, read_pct: float) -> np.ndarray:
    """Directions of ``n`` I/Os of a mixed job (1 read, 0 write): ``read_pct`` % of them reads, rounded, at
    random places -- the share asked for exactly, even in a short pass (fio draws each I/O's direction)."""
    k = np.zeros(n, dtype=np.uint8)
    k[rng.permutation(n)[:round(n * read_pct / 100)]] = 1
    return k


def op_kinds(job: JobConfig, nblocks: int, loop: int) -> bytes:
    """Per op 1 = read, 0 = write (one byte for a job that only reads or only writes)."""
    if job.rw not in ("rw", "randrw"):
        return b"\x01" if job.reads else b"\x00"
    return mix_kinds(np.random.default_rng([job.seed, loop, 0x0F11]), nblocks, job.rwmixread).tobytes()


@dataclass
class PassIO:
    """One pass of a job: I/O number ``i`` of the pass goes to ``offs[i]`` (absolute, in file ``files[i]`` when
    there are several), moves ``sizes[i]`` bytes (or ``size`` for every I/O) in direction ``kinds[i % len]``."""
    offs: array.array
    kinds: bytes
    size: int = 0
    sizes: array.array | None = None
    files: array.array | None = None

    def __len__(self) -> int:
        return len(self.offs)

    def nbytes(self) -> int:
        return int(np.frombuffer(self.sizes, dtype=np.int64).sum()) if self.sizes is not None \
            else self.size * len(self.offs)


def _as_array(a: np.ndarray) -> array.array:
    out = array.array("q")
    out.frombytes(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return out


class IoPlan:
    """The I/O of one job (one clone of it) over a region of ``region`` bytes at byte ``base`` of its descriptor,
    or over several files (``files``: each one's region start and length; offsets are then within each file)."""

    def __init__(self, job: JobConfig, region: int, base: int = 0, *, clone: int = 0, run_seed: int = 0,
                 files: list[tuple[int, int]] | None = None) -> None:
        self.job, self.base, self.clone = job, base, clone
        self.seed = job.seed if job.randrepeat else run_seed
        self.files = files
        self.region = region
        lens = [n for _, n in files] if files else [region]
        self.splits = {d: job.split_for(d) for d in ("read", "write", "trim")}
        dirs = job.directions or ("read",)
        sizes = {s for d in dirs for s, _ in self.splits[d]}
        #: one size for every I/O (the engines' fast loops), or 0
        self.fixed_bs = sizes.pop() if len(sizes) == 1 else 0
        self.align = job.blockalign_bytes or job.min_bs
        for n in lens:
            if n < (self.fixed_bs or job.max_bs):
                raise ConfigError(f"job {job.name}: a region of {n} B is smaller than one block")
        self._sizes = lens
        #: the pass's I/Os, or for several block sizes at most that many
        pairs = job.rw in ("trimwrite", "randtrimwrite")  # each block trimmed, then written
        self.pass_ios = sum(n // (self.fixed_bs or job.min_bs) for n in lens) * (2 if pairs else 1)
        if self.pass_ios > MAX_PASS_IOS and not self.windowable:
            raise ConfigError(
                f"job {job.name}: one pass over its {sum(lens)} B is {self.pass_ios} I/Os, more than sdbench "
                f"holds at once ({MAX_PASS_IOS}) for {self._unwindowable()}; give it a smaller size (size=, "
                f"offset=, filesize=) or bigger blocks")

    @property
    def windowable(self) -> bool:
        """The pass can be made in windows: one size, one file, and a pattern without memory of earlier I/Os."""
        return not self._unwindowable()

    def _unwindowable(self) -> str:
        """Why the pass cannot be made in windows ('' when it can)."""
        job = self.job
        if not self.fixed_bs:
            return "several block sizes"
        if self.files is not None:
            return "several files"
        if job.sprandom:
            return "sprandom"
        if job.random and (job.random_distribution != "random" or job.percentage_random < 100
                           or job.rw_random_run):
            return "this random pattern"
        if not job.random and job.rw_skip_bytes:
            return "sequential I/O with a skip"
        return ""

    def windows(self) -> int:
        """Windows a pass is made in (1: the pass is made whole)."""
        if self.pass_ios <= WINDOW_IOS or not self.windowable:
            return 1
        return -(-self.pass_ios // WINDOW_IOS)

    # ---- what the engines ask ------------------------------------------------------------------------------
    @property
    def simple(self) -> bool:
        """One size, one file, the order fio's defaults give: the engines' fast loops can run it."""
        return bool(self.fixed_bs) and self.files is None

    def pass_io(self, loop: int = 0, p: int = 0, window: int = 0) -> PassIO:
        """One pass (or its window ``window`` of :meth:`windows`)."""
        job = self.job
        if self.windows() > 1:
            return self._window(loop, p, window)
        if self.files is None:
            offs, sizes, kinds = self._one(self.region, loop, p, 0)
            return PassIO(_as_array(offs + self.base), kinds, self.fixed_bs,
                          None if sizes is None else _as_array(sizes))
        assert self.files is not None
        parts = [self._one(n, loop, p, f) for f, n in enumerate(self._sizes)]
        order = self._file_order([len(o) for o, _, _ in parts], loop, p)
        offs = np.empty(order.size, dtype=np.int64)
        sizes = np.empty(order.size, dtype=np.int64)
        kinds = np.empty(order.size, dtype=np.uint8)
        for f, (o, s, k) in enumerate(parts):
            idx = np.nonzero(order == f)[0]
            offs[idx] = o[: idx.size] + self.files[f][0]
            sizes[idx] = s[: idx.size] if s is not None else self.fixed_bs or job.bs_bytes
            kk = np.frombuffer(k, dtype=np.uint8)
            kinds[idx] = kk[np.arange(idx.size) % kk.size]
        return PassIO(_as_array(offs), kinds.tobytes(), self.fixed_bs,
                      None if self.fixed_bs else _as_array(sizes), _as_array(order))

    def _file_order(self, counts: list[int], loop: int, p: int) -> np.ndarray:
        """Which file each I/O of the pass goes to (file_service_type): in turn, ``file_service_ios`` at a time;
        at random; or every I/O of one file before the next."""
        job = self.job
        nf = len(counts)
        if job.file_service_type == "sequential":
            return np.repeat(np.arange(nf), counts)
        per = job.file_service_ios
        left = list(counts)
        out: list[int] = []
        rng = self._rng(loop, p, 0, 0x0F14)
        f = 0
        while any(left):
            if job.file_service_type == "random":
                live = [i for i, c in enumerate(left) if c]
                f = live[int(rng.integers(0, len(live)))]
            elif not left[f]:
                f = (f + 1) % nf
                continue
            take = min(per, left[f])
            out.extend([f] * take)
            left[f] -= take
            f = (f + 1) % nf
        return np.array(out, dtype=np.int64)

    def _window(self, loop: int, p: int, window: int) -> PassIO:
        """I/Os ``window * WINDOW_IOS ...`` of a pass that :meth:`windowable` allows to make in windows."""
        job, bs, region = self.job, self.fixed_bs, self.region
        pairs = job.rw in ("trimwrite", "randtrimwrite")
        nblocks = self.pass_ios // 2 if pairs else self.pass_ios
        per = WINDOW_IOS // 2 if pairs else WINDOW_IOS
        idx = np.arange(window * per, min(nblocks, (window + 1) * per), dtype=np.int64)
        key = (self.seed, loop, self.clone, p)
        if not job.random:
            offs = idx * bs
        else:
            unit = job.blockalign_bytes or bs
            nunits = max(1, (region - bs) // unit + 1)
            if unit == bs and (not job.norandommap or job.random_generator == "lfsr"):
                offs = permuted(nunits, key, idx) * unit  # fio's random map: every block once per pass
            else:
                rng = np.random.default_rng([*key, window, 0x0F13])
                offs = rng.integers(0, nunits, size=idx.size, dtype=np.int64) * unit
        if job.zonemode == "strided":
            offs = self._strided(offs, region)
        if pairs:
            offs = np.repeat(offs, 2)
            kinds = bytes([2, 0])
        elif job.rw in ("rw", "randrw"):
            kinds = mix_kinds(np.random.default_rng([*key, window, 0x0F11]), idx.size, job.rwmixread).tobytes()
        else:
            kinds = bytes([{"read": 1, "write": 0, "trim": 2}[(job.directions or ("read",))[0]]])
        return PassIO(_as_array(offs + self.base), kinds, bs)

    # ---- one region ----------------------------------------------------------------------------------------
    def _rng(self, loop: int, p: int, f: int, tag: int) -> np.random.Generator:
        key = [self.seed, loop, tag] if (self.clone, p, f) == (0, 0, 0) else [self.seed, loop, tag, self.clone, p, f]
        return np.random.default_rng(key)

    def _one(self, region: int, loop: int, p: int, f: int) -> tuple[np.ndarray, np.ndarray | None, bytes]:
        job = self.job
        if job.sprandom:
            return self._sprandom(region, loop, p, f)
        n, sizes, kinds = self._sizes_and_kinds(region, loop, p, f)
        if job.random:
            offs = self._random_offsets(region, n, sizes, loop, p, f)
        else:
            offs = self._sequential_offsets(region, n, sizes)
        if job.zonemode == "strided":
            offs = self._strided(offs, region)
        if job.rw in ("trimwrite", "randtrimwrite"):
            # each block trimmed, then written
            offs = np.repeat(offs, 2)
            sizes = None if sizes is None else np.repeat(sizes, 2)
            kinds = bytes([2, 0]) * n
        return offs, sizes, kinds

    def _sizes_and_kinds(self, region: int, loop: int, p: int, f: int) -> tuple[int, np.ndarray | None, bytes]:
        job = self.job
        if job.rw in ("rw", "randrw"):
            mix = True
        else:
            mix = False
        if self.fixed_bs:
            n = region // self.fixed_bs
            if mix:
                rng = self._rng(loop, p, f, 0x0F11)
                kinds = mix_kinds(rng, n, job.rwmixread).tobytes()
            else:
                kinds = bytes([{"read": 1, "write": 0, "trim": 2}[(job.directions or ("read",))[0]]])
            return n, None, kinds
        # several sizes: draw directions and sizes until the pass covers the region
        rng = self._rng(loop, p, f, 0x0F12)
        kind_parts, size_parts, total = [], [], 0
        while total < region:
            m = _DRAW_CHUNK
            if mix:
                k = mix_kinds(rng, m, job.rwmixread)
            else:
                k = np.full(m, {"read": 1, "write": 0, "trim": 2}[(job.directions or ("read",))[0]], dtype=np.uint8)
            s = np.empty(m, dtype=np.int64)
            for code, d in ((1, "read"), (0, "write"), (2, "trim")):
                idx = np.nonzero(k == code)[0]
                if idx.size:
                    split = self.splits[d]
                    vals = np.array([v for v, _ in split], dtype=np.int64)
                    pr = np.array([w for _, w in split], dtype=np.float64)
                    s[idx] = vals[rng.choice(len(vals), size=idx.size, p=pr / pr.sum())]
            if job.bs_is_seq_rand:
                s = self._seq_rand_sizes(rng, m)
            cum = np.cumsum(s)
            cut = int(np.searchsorted(cum, region - total, side="left")) + 1
            cut = min(cut, m)
            kind_parts.append(k[:cut])
            size_parts.append(s[:cut])
            total += int(cum[cut - 1])
        kinds_arr = np.concatenate(kind_parts)
        sizes_arr = np.concatenate(size_parts)
        # the last I/O may reach past the region: drop it
        if int(sizes_arr.sum()) > region and sizes_arr.size > 1:
            kinds_arr, sizes_arr = kinds_arr[:-1], sizes_arr[:-1]
        return sizes_arr.size, sizes_arr, kinds_arr.tobytes()

    def _seq_rand_sizes(self, rng: np.random.Generator, m: int) -> np.ndarray:
        """bs_is_seq_rand: sequential I/O takes the read sizes, random I/O the write sizes."""
        d = "write" if self.job.random else "read"
        split = self.splits[d]
        vals = np.array([v for v, _ in split], dtype=np.int64)
        pr = np.array([w for _, w in split], dtype=np.float64)
        return vals[rng.choice(len(vals), size=m, p=pr / pr.sum())]

    def _sequential_offsets(self, region: int, n: int, sizes: np.ndarray | None) -> np.ndarray:
        """Up the region, each I/O after the last one (plus rw's skip); going round at the end.  A negative skip
        goes backwards from the end, as fio's ``rw=read:-8k``."""
        job = self.job
        skip = job.rw_skip_bytes
        if sizes is None:
            bs = self.fixed_bs
            if not skip:
                return np.arange(n, dtype=np.int64) * bs
            length = region // bs * bs
            start = max(0, length + skip) if skip < 0 else 0
            pos = (start + np.arange(n, dtype=np.int64) * (bs + skip)) % length
            pos[pos + bs > length] = 0  # a step that is no multiple of the block: wrap to the start
            return pos
        starts = np.concatenate([[0], np.cumsum(sizes[:-1] + skip)])
        limit = region - int(sizes.max()) + 1
        if skip < 0:
            starts = region - int(sizes.max()) + starts
        return (starts % limit) // 512 * 512

    def _random_offsets(self, region: int, n: int, sizes: np.ndarray | None, loop: int, p: int,
                        f: int) -> np.ndarray:
        job = self.job
        unit = self.align if not self.fixed_bs else (job.blockalign_bytes or self.fixed_bs)
        biggest = self.fixed_bs or int(sizes.max()) if sizes is not None else self.fixed_bs
        nunits = max(1, (region - biggest) // unit + 1)
        plain = (job.random_distribution == "random" and job.percentage_random == 100 and not job.rw_random_run)
        if plain and self.fixed_bs and unit == self.fixed_bs and (not job.norandommap
                                                                   or job.random_generator == "lfsr"):
            # fio's random map: every block once per pass
            perm = np.random.default_rng([self.seed, loop, 0x0F10] if (self.clone, p, f) == (0, 0, 0)
                                         else [self.seed, loop, 0x0F10, self.clone, p, f]).permutation(nunits)
            return perm.astype(np.int64)[:n] * unit
        rng = self._rng(loop, p, f, 0x0F13)
        units = self._draw_units(rng, nunits, n)
        offs = units * unit
        if job.rw_random_run > 1:
            # a new random offset every rw_random_run I/Os; the others follow it (or repeat it)
            run = job.rw_random_run
            first = offs[::run]
            head = np.repeat(first, run)[:n]
            if job.rw_sequencer == "identical":
                offs = head
            else:
                step = sizes if sizes is not None else np.full(n, self.fixed_bs, dtype=np.int64)
                csum = np.cumsum(step) - step
                grp = np.arange(n) // run
                offs = head + (csum - csum[grp * run])
                offs = offs % (region - biggest + 1) // 512 * 512
        if job.percentage_random < 100:
            # a random share of the I/Os jump; the others follow the one before (from the region's start
            # until the first jump)
            jump = rng.random(n) * 100 < job.percentage_random
            step = sizes if sizes is not None else np.full(n, self.fixed_bs, dtype=np.int64)
            idx = np.maximum.accumulate(np.where(jump, np.arange(n), -1))
            csum = np.cumsum(step) - step
            head = np.where(idx >= 0, offs[np.maximum(idx, 0)] + csum - csum[np.maximum(idx, 0)], csum)
            offs = head % (region - biggest + 1) // 512 * 512
        return offs.astype(np.int64)

    def _draw_units(self, rng: np.random.Generator, nunits: int, n: int) -> np.ndarray:
        """n unit numbers in [0, nunits) by the job's distribution."""
        job = self.job
        dist = job.random_distribution
        if dist == "random":
            if job.random_generator == "lfsr" and n <= nunits:
                return rng.permutation(nunits)[:n].astype(np.int64)
            return rng.integers(0, nunits, size=n, dtype=np.int64)
        if dist == "zipf":
            return self._ranked(rng, nunits, n, 1.0 / np.arange(1, nunits + 1, dtype=np.float64)
                                ** job.distribution_param)
        if dist == "pareto":
            # fio's pareto: values near the start of the range most likely, skewed by the power h (0..1)
            u = rng.random(n)
            x = np.power(u, 1.0 / max(1e-9, 1.0 - job.distribution_param) if job.distribution_param < 1 else 1e9)
            units = np.minimum((x * nunits).astype(np.int64), nunits - 1)
            return self._centred(units, nunits, 0.0)
        if dist == "normal":
            center = 0.5 if job.distribution_center < 0 else job.distribution_center
            sigma = job.distribution_param / 100.0 * nunits
            units = np.rint(rng.normal(center * (nunits - 1), sigma, size=n)).astype(np.int64)
            return np.mod(units, nunits)
        # zoned, zoned_abs: a zone by its access share, then uniform within it
        zones = job.zones
        bounds, start = [], 0
        for z in zones:
            length = (round(z.size_pct / 100.0 * nunits) if dist == "zoned"
                      else max(1, z.size_bytes // self.align))
            length = max(0, min(length, nunits - start))
            bounds.append((start, length))
            start += length
        access = np.array([z.access_pct for z in zones], dtype=np.float64)
        pick = rng.choice(len(zones), size=n, p=access / access.sum())
        out = np.empty(n, dtype=np.int64)
        for i, (s, length) in enumerate(bounds):
            idx = np.nonzero(pick == i)[0]
            if idx.size:
                if length <= 0:
                    raise ConfigError(f"job {job.name}: zone {i + 1} of the distribution is past the end of the "
                                      f"region")
                out[idx] = s + rng.integers(0, length, size=idx.size)
        return out

    def _ranked(self, rng: np.random.Generator, nunits: int, n: int, weights: np.ndarray) -> np.ndarray:
        """Draws by rank weights; the ranks are spread over the region (fio hashes them) or start at the centre."""
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]
        ranks = np.searchsorted(cdf, rng.random(n), side="right").astype(np.int64)
        ranks = np.minimum(ranks, nunits - 1)
        if self.job.distribution_center >= 0:
            return self._centred(ranks, nunits, self.job.distribution_center)
        spread = np.random.default_rng([self.seed, 0x2F1]).permutation(nunits).astype(np.int64)
        return spread[ranks]

    @staticmethod
    def _centred(units: np.ndarray, nunits: int, center: float) -> np.ndarray:
        return (units + int(center * nunits)) % nunits

    def _strided(self, offs: np.ndarray, region: int) -> np.ndarray:
        """zonemode=strided: ``zonesize`` bytes of I/O in each zone of ``zonerange`` (or zonesize) bytes, then
        ``zoneskip`` bytes skipped; the zones go round the region."""
        job = self.job
        size = job.zonesize_bytes
        stride = (job.zonerange_bytes or size) + job.zoneskip_bytes
        nzones = max(1, region // stride)
        zone = (offs // size) % nzones
        return zone * stride + offs % size

    def _sprandom(self, region: int, loop: int, p: int, f: int) -> tuple[np.ndarray, None, bytes]:
        """SSD preconditioning (fio's sprandom): the device's physical capacity (region x (1 + op)) written once,
        in regions; each region rewrites the share of the region before it that the steady-state model says is
        invalid there.  The model (Desnoyers, "Analytic Models of SSD Write Performance", 2012): write
        amplification ~ 0.5 / op + 0.7, the block picked for garbage collection is 1 - 1/WA valid, and across the
        drive validity x space is constant, so the regions' validities are read off that curve at equal spacing
        of space."""
        job = self.job
        bs = self.fixed_bs
        nblocks = region // bs
        op = job.spr_op
        nreg = job.spr_num_regions
        waf = 0.5 / op + 0.7
        v_gc = 1.0 - 1.0 / waf
        valid = np.linspace(1.0, v_gc, nreg)
        space = np.cumsum(1.0 / valid)
        even = np.linspace(space[0], space[-1], nreg)
        validity = np.interp(even, space, valid)[::-1]
        invalid = 1.0 - validity
        physical = int(nblocks * (1 + op))
        per_region = max(1, physical // nreg)
        rng = self._rng(loop, p, f, 0x5F2)
        fresh = rng.permutation(nblocks)
        out: list[np.ndarray] = []
        pending = np.empty(0, dtype=np.int64)
        used = 0
        written = 0
        for r in range(nreg):
            if written >= physical:
                break
            room = per_region
            # the previous region's share of rewrites (its invalidated blocks) and new blocks; with a device
            # cache (spr_cs) the rewrites go after the new blocks, so the cache has flushed what they replace
            rew = pending[:room]
            room -= rew.size
            take = fresh[used: used + room]
            used += take.size
            parts = [take, rew] if job.spr_cs_bytes else [rew, take]
            out += parts
            region_blocks = np.concatenate(parts)
            written += region_blocks.size
            keep = rng.random(region_blocks.size) < invalid[r]
            pending = region_blocks[keep]
            if used >= nblocks and not pending.size:
                break
        offs = np.concatenate(out).astype(np.int64) * bs if out else np.empty(0, dtype=np.int64)
        return offs, None, b"\x00"


def io_amount(job: JobConfig, p: PassIO, pass_ios: int = 0) -> int:
    """I/Os of one loop: one pass, io_size's worth, or without limit (time based).  ``p`` is the pass, or for a
    pass made in windows its first window and ``pass_ios`` the whole pass's I/Os."""
    if job.time_based:
        return sys.maxsize
    n = pass_ios or len(p)
    if not job.io_size_bytes:
        return n
    pass_bytes = n * p.size if pass_ios else p.nbytes()
    if not pass_bytes:
        return n
    full, rest = divmod(job.io_size_bytes, pass_bytes)
    if not rest:
        return full * n
    if p.sizes is None:
        return full * n + -(-rest // p.size)
    cum = np.cumsum(np.frombuffer(p.sizes, dtype=np.int64))
    return full * n + int(np.searchsorted(cum, rest, side="left")) + 1


def ioprio(cls: int, level: int, hint: int = 0) -> int:
    """Linux's I/O priority value: class in the top 3 bits, hint above the 3-bit level."""
    return (cls << 13) | (hint << 3) | level


def command_prios(job: JobConfig, plan: PassIO) -> list[int] | None:
    """Per I/O of the pass, the I/O priority fio's cmdprio options give it (None without them): Linux's value,
    class in the top 3 bits, hint above the 3-bit level."""
    if not (any(job.cmdprio_percentage) or job.cmdprio_bssplit):
        return None
    n = len(plan)
    rng = np.random.default_rng([job.seed, 0xC0D])
    draws = rng.random(n) * 100
    kinds = np.frombuffer(plan.kinds, dtype=np.uint8)
    kinds = kinds[np.arange(n) % kinds.size]
    sizes = np.frombuffer(plan.sizes, dtype=np.int64) if plan.sizes is not None else np.full(n, plan.size)
    default = ioprio(job.prioclass, max(job.prio, 0), job.priohint) if job.prioclass >= 0 else 0
    out = np.full(n, default, dtype=np.int64)
    for code, d in ((READ, 0), (WRITE, 1)):
        sel = kinds == code
        if job.cmdprio_bssplit:
            acc = np.zeros(n)
            for e in job.cmdprio_bssplit:
                if (e.direction == "read") != (code == READ):
                    continue
                m = sel & (sizes == e.size_bytes)
                hit = m & (draws >= acc) & (draws < acc + e.percent)
                out[hit] = ioprio(e.prio_class, e.level, e.hint)
                acc = np.where(m, acc + e.percent, acc)
        elif job.cmdprio_percentage[d]:
            hit = sel & (draws < job.cmdprio_percentage[d])
            out[hit] = ioprio(job.cmdprio_class[d], job.cmdprio[d], job.cmdprio_hint[d])
    return [int(x) for x in out]
