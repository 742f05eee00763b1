"""ESP-IDF wear levelling (the ``wear_levelling`` component, WL_Flash) over a flash partition.

Mechanism, as ESP-IDF implements it with 4096-byte sectors:

* Layout at the end of the partition: the config sector (last), before it two
  copies of the state (each ``state_size`` bytes: the 64-byte state record
  followed by one 16-byte *position record* per partition sector, rounded up
  to whole sectors: 3 sectors for a 2 MiB partition).  The rest holds the data
  sectors plus one spare, the *dummy* sector.
* ``flash_size`` (what the filesystem sees) = data area minus the dummy sector.
  A logical address maps to physical through the rotation ``move_count`` and
  the dummy position ``pos``: ``r = (flash_size - move_count*page + addr) %
  flash_size``, then ``r + page`` if ``r >= pos*page``.
* Every sector *erase* counts one access; at ``updaterate`` (16) accesses the
  dummy moves: erase the dummy sector, copy the next physical sector into it
  (in ``temp_buff_bytes`` pieces, 32 B), append a position record to both
  state copies, ``pos += 1``.  When ``pos`` wraps, ``move_count`` grows and
  both state copies are erased and rewritten.
* ``wl_write`` only programs (no erase); ``wl_erase_range`` erases sector by
  sector through the mapping.  FatFs' diskio glue does erase + write per
  request, which is what :meth:`WearLevelling.write` (the BlockDevice view) does.
* Mount reads both state copies; if neither is valid the sections are
  initialised (state copies and config erased and written); the dummy position
  is recovered by scanning position records.  Unmount (:meth:`close`) forces
  one dummy move, as ``wl_unmount`` does through ``flush()``.

512-byte sectors (``WL_Ext_Perf``, ESP-IDF's ``CONFIG_WL_SECTOR_SIZE_512`` in
performance mode): WL_Flash below still works in 4096-byte flash sectors (the
layout above is the same); the filesystem sees 512-byte sectors.  Erasing part
of a flash sector reads the 512-byte pieces that stay (one ``wl_read`` each),
erases the whole flash sector (one WL access) and programs the pieces back;
sectors the range covers whole are erased directly.  Safety mode
(``WL_Ext_Safe``, which first saves the pieces to a spare sector) is not
modelled.

``wl_read``/``wl_write`` map one WL page at a time.  ESP-IDF maps the start of
each page-sized piece of the request, which for a request that starts inside a
page puts the piece's tail in the next *physical* page; the model splits a
request at the page boundaries of the logical address instead, so each piece is
mapped on its own (the same calls for page-aligned requests, one more flash
read or program where an unaligned request crosses a page).

Records use ESP-IDF's layout and CRC (crc32_le with seed 0xFFFFFFFF, which is
zlib's CRC-32).
"""
from __future__ import annotations

import random
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..options import opt, to_mapping
from .base import BlockDevice, BlockDeviceWrapper, Geometry

STATE_RECORD_BYTES = 64     # sizeof(wl_state_t): 16 x uint32, 32-byte aligned
CONFIG_RECORD_BYTES = 48    # sizeof(wl_config_t): 9 x uint32 padded to a multiple of 16
_STATE = struct.Struct("<16I")
_CONFIG = struct.Struct("<9I12x")
CRC_SEED = 0xFFFFFFFF
U32_MAX = 0xFFFFFFFF


def crc32_le(data: bytes, seed: int = CRC_SEED) -> int:
    """ESP ROM crc32_le(seed, data): reflected CRC-32, same as zlib's with that start value."""
    return zlib.crc32(data, seed) & 0xFFFFFFFF


@dataclass(frozen=True)
class WlConfig:
    sector_size_bytes: int = opt(4096, unit="B", choices=(512, 4096),
                                 help="sector size the filesystem sees (512: CONFIG_WL_SECTOR_SIZE_512, performance mode; "
                                      "erases stay 4096 B)")
    page_size_bytes: int = opt(4096, unit="B", min=4096,
                               help="wl_page_size: unit the dummy moves by (a multiple of the flash sector)")
    updaterate: int = opt(16, unit="erases", min=1, help="sector erases between two moves of the dummy sector")
    pos_record_bytes: int = opt(16, unit="B", min=16, help="position record appended per move (wr_size)")
    temp_buff_bytes: int = opt(32, unit="B", min=16, help="copy buffer of a dummy move (read/write piece size)")
    version: int = opt(2, min=1, max=U32_MAX, help="state format version")
    device_id_seed: int = opt(1, help="seed of the random device id written at initialisation")

    def __post_init__(self) -> None:
        # the state and config records store these as uint32 (wl_state_t, wl_config_t); ValueError so the
        # option loader names the table
        for name in ("page_size_bytes", "updaterate", "pos_record_bytes", "temp_buff_bytes", "version"):
            if getattr(self, name) > U32_MAX:
                raise ValueError(f"{name} = {getattr(self, name)} does not fit the 32-bit field of the WL records")
        sec = self.sector_size_bytes
        if self.page_size_bytes % sec:
            raise ValueError(f"page_size_bytes = {self.page_size_bytes} B is not a multiple of "
                             f"sector_size_bytes = {sec} B")
        if self.page_size_bytes % self.temp_buff_bytes:
            raise ValueError(f"temp_buff_bytes = {self.temp_buff_bytes} B does not divide page_size_bytes = "
                             f"{self.page_size_bytes} B (a dummy move copies a page in pieces of this size)")


def flash_sector_bytes(cfg: WlConfig, erase_size: int) -> int:
    """The sector WL_Flash itself works in: the filesystem's sector, or the flash erase sector when the
    filesystem's is smaller (the 512-byte mode)."""
    return max(cfg.sector_size_bytes, erase_size)


@dataclass(frozen=True)
class WlLayout:
    """Where wear levelling keeps its sections in a partition (all in bytes)."""

    state_size: int      # one state copy: the record plus one position record per partition sector
    cfg_size: int        # the config sector(s)
    flash_size: int      # what the filesystem sees: the data area minus the dummy sector

    @classmethod
    def of(cls, partition_bytes: int, erase_size: int, cfg: WlConfig) -> "WlLayout":
        """The layout for a partition; ConfigError when it cannot hold wear levelling.  No device I/O."""
        sec = flash_sector_bytes(cfg, erase_size)
        if sec % erase_size:
            raise ConfigError(f"wear levelling sector ({sec} B) is not a multiple of the flash erase size "
                              f"({erase_size} B)")
        state_size = sec
        need = STATE_RECORD_BYTES + (partition_bytes // sec) * cfg.pos_record_bytes
        if state_size < need:
            state_size = -(-need // sec) * sec
        cfg_size = -(-CONFIG_RECORD_BYTES // sec) * sec
        page = cfg.page_size_bytes
        flash_size = ((partition_bytes - 2 * state_size - cfg_size) // page - 1) * page  # -1: the dummy sector
        if flash_size <= 0:
            raise ConfigError(f"partition of {partition_bytes} B is too small for wear levelling "
                              f"(needs {2 * state_size + cfg_size + 2 * page} B at least)")
        return cls(state_size, cfg_size, flash_size)


@dataclass
class WlState:
    pos: int = 0
    max_pos: int = 0
    move_count: int = 0
    access_count: int = 0
    max_count: int = 16
    block_size: int = 4096
    version: int = 2
    device_id: int = 0

    def pack(self) -> bytes:
        fields = [self.pos, self.max_pos, self.move_count, self.access_count, self.max_count, self.block_size,
                  self.version, self.device_id, 0, 0, 0, 0, 0, 0, 0]
        body = _STATE.pack(*fields, 0)[:-4]
        return body + struct.pack("<I", crc32_le(body))

    @classmethod
    def unpack(cls, raw: bytes) -> tuple["WlState", bool]:
        v = _STATE.unpack(raw[:STATE_RECORD_BYTES])
        ok = crc32_le(raw[:STATE_RECORD_BYTES - 4]) == v[15]
        return cls(*v[:8]), ok


class WearLevelling(BlockDeviceWrapper):
    """ESP-IDF WL_Flash over a byte-addressed flash partition (a BlockDevice with sector_size 1).

    As a BlockDevice it exposes 4096-byte sectors; ``write`` = erase + program
    per request (FatFs' ``ff_wl_write``).  The raw ESP-IDF calls are
    :meth:`wl_read`, :meth:`wl_write` (program only), :meth:`wl_erase_range`.
    """

    kind = "wear-levelling"

    def __init__(self, inner: BlockDevice, config: WlConfig | None = None) -> None:
        cfg = config or WlConfig()
        g = inner.geometry
        if g.sector_size != 1:
            raise ConfigError(f"wear levelling needs a byte-addressed flash partition (sector_size 1), "
                              f"got sector_size {g.sector_size}")
        sec = cfg.sector_size_bytes
        full = g.size_bytes
        lay = WlLayout.of(full, g.erase_size, cfg)
        #: WL_Flash's own sector (the flash erase sector in the 512-byte mode)
        self.wl_sector = flash_sector_bytes(cfg, g.erase_size)
        state_size, cfg_size, flash_size = lay.state_size, lay.cfg_size, lay.flash_size
        page = cfg.page_size_bytes
        self.config = cfg
        self.state_size = state_size
        self.cfg_size = cfg_size
        self.addr_cfg = full - cfg_size
        self.addr_state1 = full - 2 * state_size - cfg_size
        self.addr_state2 = full - state_size - cfg_size
        self.flash_size = flash_size
        self._page = page
        self._rng = random.Random(f"wl-device-id:{cfg.device_id_seed}")
        self.state = WlState()
        #: dummy moves done by this instance (relocations)
        self.moves = 0
        super().__init__(inner, Geometry(sector_size=sec, sector_count=flash_size // sec, read_size=sec,
                                         prog_size=sec, erase_size=sec, erase_value=g.erase_value))
        self._inner_read = inner.reader()  # the partition's read for many direct calls (BlockDevice.reader)
        self.mount()

    # ---- ESP-IDF API ----------------------------------------------------------------
    def wl_size(self) -> int:
        return self.flash_size

    def wl_sector_size(self) -> int:
        return self.config.sector_size_bytes

    def calc_addr(self, addr: int) -> int:
        """Logical byte address -> physical address in the partition."""
        page = self._page
        st = self.state
        r = (self.flash_size - st.move_count * page + addr) % self.flash_size
        if r >= st.pos * page:
            r += page
        return r

    def _pieces(self, addr: int, size: int) -> list[tuple[int, int]]:
        """(logical offset into the request, length) of each WL page the request touches."""
        page = self._page
        out, off = [], 0
        while off < size:
            n = min(size - off, page - (addr + off) % page)
            out.append((off, n))
            off += n
        return out

    def wl_read(self, addr: int, size: int, *, buf_addr: int = 0) -> bytes:
        """wl_read: one partition read per WL page, through the mapping."""
        if size <= 0:
            return b""
        out = bytearray()
        for off, n in self._pieces(addr, size):
            out += self._inner_read(self.calc_addr(addr + off), n, buf_addr=buf_addr)
        return bytes(out)

    def wl_write(self, addr: int, data: bytes | bytearray | memoryview, *, buf_addr: int = 0) -> None:
        """wl_write: program only (the caller erases first), one partition write per WL page."""
        size = len(data)
        if size == 0:
            return
        self._check_writable()
        mv = memoryview(bytes(data))
        for off, n in self._pieces(addr, size):
            self.inner.write(self.calc_addr(addr + off), mv[off:off + n], buf_addr=buf_addr)

    def wl_erase_range(self, addr: int, size: int) -> None:
        """wl_erase_range: every flash sector counts towards the next dummy move, then is erased; in the
        512-byte mode a flash sector the range covers in part keeps its other pieces (read, erase, program back)."""
        self._check_writable()
        fsec, sec = self.wl_sector, self.config.sector_size_bytes
        if sec == fsec:
            start = addr // sec
            for i in range(-(-size // sec)):
                self.erase_sector(start + i)
            return
        end = addr + size
        for base in range(addr - addr % fsec, end, fsec):
            lo, hi = max(addr, base), min(end, base + fsec)
            if lo == base and hi == base + fsec:
                self.erase_sector(base // fsec)
                continue
            keep = [(a, self.wl_read(a, sec)) for a in range(base, base + fsec, sec) if not lo <= a < hi]
            self.erase_sector(base // fsec)
            for a, piece in keep:
                self.wl_write(a, piece)

    def erase_sector(self, sector: int) -> None:
        """Erase one WL_Flash sector (``wl_sector`` bytes) through the mapping; one access towards a dummy move."""
        self._update_wl()
        fsec = self.wl_sector
        phys = self.calc_addr(sector * fsec)
        self.inner.erase(phys - phys % fsec, fsec)

    def flush(self) -> None:
        """Force one dummy move (what wl_unmount does)."""
        self.state.access_count = self.state.max_count - 1
        self._update_wl()

    # ---- mount / state ----------------------------------------------------------------
    def mount(self) -> None:
        """wl_mount: read both state copies, initialise or repair, recover the dummy position."""
        raw1 = self._inner_read(self.addr_state1, STATE_RECORD_BYTES)
        raw2 = self._inner_read(self.addr_state2, STATE_RECORD_BYTES)
        s1, ok1 = WlState.unpack(raw1)
        s2, ok2 = WlState.unpack(raw2)
        if ok1 and ok2:
            self.state = s1
            if s1.version != self.config.version:
                self._init_sections()
            elif raw1 != raw2:  # the second copy was not updated: copy state and records across
                self._copy_state(self.addr_state1, self.addr_state2)
            self._recover_pos()
        elif not ok1 and not ok2:
            self._init_sections()
            self._recover_pos()
        elif ok1:
            self.state = s1
            self._copy_state(self.addr_state1, self.addr_state2)
            self._recover_pos()
        else:
            self.state = s2
            self._copy_state(self.addr_state2, self.addr_state1)
            self.state.pos = self.state.max_pos - 1
        if self.state.version != self.config.version:
            self._init_sections()

    def _init_sections(self) -> None:
        cfg = self.config
        self.state = WlState(pos=0, max_pos=1 + self.flash_size // self._page, move_count=0, access_count=0,
                             max_count=cfg.updaterate, block_size=self._page, version=cfg.version,
                             device_id=self._rng.getrandbits(32))
        packed = self.state.pack()
        for addr in (self.addr_state1, self.addr_state2):
            self.inner.erase(addr, self.state_size)
            self.inner.write(addr, packed)
        self.inner.erase(self.addr_cfg, self.cfg_size)
        self.inner.write(self.addr_cfg, self._config_record())

    def _config_record(self) -> bytes:
        cfg = self.config
        fields = [0, self.inner.geometry.size_bytes, self._page, self.wl_sector, cfg.updaterate,
                  cfg.pos_record_bytes, cfg.version, cfg.temp_buff_bytes]
        body = struct.pack("<8I", *fields)
        return _CONFIG.pack(*fields, crc32_le(body))

    def _copy_state(self, src: int, dst: int) -> None:
        self.inner.erase(dst, self.state_size)
        self.inner.write(dst, self.state.pack())
        rec = self.config.pos_record_bytes
        for i in range(self.state.max_pos):
            raw = self._inner_read(src + STATE_RECORD_BYTES + i * rec, rec)
            if raw[:16] == self._ok_record(i):
                self.inner.write(dst + STATE_RECORD_BYTES + i * rec, raw)

    def _ok_record(self, n: int) -> bytes:
        """Position record n: four CRCs of device_id + 4n + i (fillOkBuff)."""
        dev = self.state.device_id
        return b"".join(struct.pack("<I", crc32_le(struct.pack("<I", (dev + n * 4 + i) & 0xFFFFFFFF)))
                        for i in range(4))

    def _pos_record(self, n: int) -> bytes:
        return self._ok_record(n) + b"\x00" * (self.config.pos_record_bytes - 16)

    def _recover_pos(self) -> None:
        rec = self.config.pos_record_bytes
        pos = 0
        for i in range(self.state.max_pos):
            pos = i
            raw = self._inner_read(self.addr_state1 + STATE_RECORD_BYTES + i * rec, rec)
            if raw[:16] != self._ok_record(i):
                break
        if pos == self.state.max_pos:
            pos -= 1
        self.state.pos = pos

    def _update_wl(self) -> None:
        st = self.state
        st.access_count += 1
        if st.access_count < st.max_count:
            return
        st.access_count = 0
        page = self._page
        data_pos = st.pos + 1
        if data_pos >= st.max_pos:
            data_pos = 0
        data_addr = data_pos * page
        dummy_addr = st.pos * page
        self.inner.erase(dummy_addr, page)
        # the page through the temp buffer: a read and a write of temp_buff_bytes each
        self.inner.copy_pieces(data_addr, dummy_addr, page, self.config.temp_buff_bytes)
        rec = self._pos_record(st.pos)
        off = STATE_RECORD_BYTES + st.pos * self.config.pos_record_bytes
        self.inner.write(self.addr_state1 + off, rec)
        self.inner.write(self.addr_state2 + off, rec)
        st.pos += 1
        self.moves += 1
        if st.pos >= st.max_pos:
            st.pos = 0
            st.move_count += 1
            if st.move_count >= st.max_pos - 1:
                st.move_count = 0
            packed = st.pack()
            for addr in (self.addr_state1, self.addr_state2):
                self.inner.erase(addr, self.state_size)
                self.inner.write(addr, packed)

    # ---- BlockDevice view (what FatFs' diskio_wl does) --------------------------------
    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        sec = self.config.sector_size_bytes
        return self.wl_read(lba * sec, count * sec, buf_addr=buf_addr)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        sec = self.config.sector_size_bytes
        self.wl_erase_range(lba * sec, len(data))
        self.wl_write(lba * sec, data, buf_addr=buf_addr)

    def _erase(self, lba: int, count: int) -> None:
        sec = self.config.sector_size_bytes
        self.wl_erase_range(lba * sec, count * sec)

    def _trim(self, lba: int, count: int) -> None:
        """No trim in ESP-IDF WL: a hint only."""

    def _sync(self) -> None:
        """CTRL_SYNC is a no-op: WL keeps nothing in RAM."""

    def _close(self) -> None:
        if not self.read_only:
            self.flush()
        self.inner.close()

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["wl"] = {**to_mapping(self.config), "flash_size_bytes": self.flash_size, "state_size_bytes": self.state_size,
                   "max_pos": self.state.max_pos}
        return d
