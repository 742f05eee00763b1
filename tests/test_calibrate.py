"""Calibration: fits physical parameters from raw rows, writes profiles, reproducibly."""
from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from sdbench.calibrate import groups, load_measurements, row_value
from sdbench.cli import main

DATA = resources.files("sdbench") / "data"


@pytest.mark.parametrize("group,card", [("esp32s3-sdmmc", "esp32s3-msc-sdmmc-card"),
                                        pytest.param("esp32s3-spi", "esp32s3-msc-spi-card", marks=pytest.mark.slow)])
def test_shipped_profiles_are_the_output_of_calibrate(group, card, tmp_path, capsys):
    from sdbench.stack.sd import load_card

    assert main(["calibrate", group, "-o", str(tmp_path), "-q"]) == 0
    out = capsys.readouterr().out
    assert "| raw sectors read |" in out
    assert "| field | of | value | σ / value | σ from |" in out
    path = tmp_path / "cards" / f"{card}.toml"
    fitted = tomllib.loads(path.read_text())
    shipped = tomllib.loads((DATA / "cards" / f"{card}.toml").read_text())
    for key in ("read_access_us", "write_busy_end_us"):
        assert fitted[key] == pytest.approx(shipped[key], rel=1e-6), key
    # every fitted field's relative standard deviation, recorded and loadable
    sd = fitted["fit_rel_sd"]
    assert {"read_access_us", "write_busy_end_us"} <= set(sd)
    assert all(0 < v < 1 for v in sd.values()), sd
    assert load_card(str(path)).fit_rel_sd == sd
    # the comments of the shipped profile stay where they were
    text = path.read_text()
    assert text.startswith(f"# fitted by `sdbench calibrate {group}`")
    for line in (DATA / "cards" / f"{card}.toml").read_text().splitlines():
        if line.startswith("# markings"):
            assert line in text


#: file-level train rows a group fits, each for one parameter no raw row measures (docs/calibration-groups.md,
#: "File-level train rows in a fit group"): (group, row label)
FILE_LEVEL_FITTED = {
    ("espidf-esp32-read", "SD FATFS (new file): read tiny size"),
    ("espidf-esp32-erase", "SD LittleFS (new file): write target size"),
    ("espidf-esp32-flash", "SPI SPIFFS (new file): read target size"),
    ("p2", "File Write 32KB"),
    ("pidramble-4b-host", "iozone -I 4k random read"),
    ("pidramble-4b", "iozone -I 4k random read"),
    ("pidramble-4b", "dd conv=fsync write"),
    ("pidramble-2b", "iozone -I 4k random read"),
    ("pidramble-4b-random", "iozone -I 4k random write"),
    # SdFat bench setups: no raw row exists; each row is consumed by a named mechanism (docs/calibration-groups.md)
    ("sdfat-rp2040-pio-sdio", "sdfat read 512 B pass 1"),
    ("sdfat-rp2040-pio-sdio", "sdfat write 512 B pass 2"),
    ("sdfat-rp2040-spi", "sdfat read 511 B pass 1"),
    ("sdfat-rp2040-spi", "sdfat write 511 B pass 2"),
    ("sdfat-rp2350-pio-sdio", "sdfat read 32768 B pass 1"),
    ("sdfat-rp2350-pio-sdio", "sdfat read 512 B pass 1"),
    ("sdfat-rp2350-pio-sdio", "sdfat write 32768 B pass 2"),
    ("sdfat-rp2350-pio-sdio", "sdfat write 512 B pass 2"),
    ("sdfat-teensy36-sdioex", "sdfat read 1024 B"),
    ("sdfat-teensy36-sdioex", "sdfat read 16384 B"),
    ("sdfat-teensy36-sdioex", "sdfat read 2048 B"),
    ("sdfat-teensy36-sdioex", "sdfat read 32768 B"),
    ("sdfat-teensy36-sdioex", "sdfat read 4096 B"),
    ("sdfat-teensy36-sdioex", "sdfat read 512 B"),
    ("sdfat-teensy36-sdioex", "sdfat read 8192 B"),
}


def test_fit_groups_use_raw_level_train_rows_and_the_reviewed_file_level_ones():
    from sdbench.calibrate import row_level
    from sdbench.calibrate.evaluation import _Evaluator

    meas = load_measurements()
    for g in groups().values():
        ev = _Evaluator(g, meas)
        used = [m for rows in ev.targets.values() for m in rows]
        assert used
        for m in used:
            assert m.split == "train" and m.value is not None
            # File Open rows constrain only the host's open cost (the cards are fixed by then)
            assert row_level(m) in ("raw", "bridge") or (m.op == "open" and (m.scenario, m.row) in g.host_rows) \
                or (g.name, m.row) in FILE_LEVEL_FITTED, (g.name, m.row)


def test_bad_group_and_data_are_one_line_errors(capsys, tmp_path):
    assert main(["calibrate", "nope"]) == 2
    assert "unknown fit group" in capsys.readouterr().err
    bad = tmp_path / "m.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["validate", "--data", str(bad)]) == 2
    assert "not a measurements file" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["character device", "fifo", "link to a file", "file in place of cards/"])
def test_an_output_that_is_no_directory_is_refused_before_any_fit(kind, tmp_path, monkeypatch, capsys):
    """Issue 32, defect 1: `calibrate GROUP -o X` with X a device, a FIFO or a link to a file ran the whole fit,
    then failed with an internal error; the path is checked first, one line, exit 2."""
    import os

    import sdbench.calibrate
    import sdbench.calibrate.fitting

    def no_fit(*a, **k):
        raise AssertionError("the fit began before the output was checked")

    # the command's `fit`, and the one fit_all's workers call
    monkeypatch.setattr(sdbench.calibrate, "fit", no_fit)
    monkeypatch.setattr(sdbench.calibrate.fitting, "fit", no_fit)
    if kind == "character device":
        out = "/dev/null"
    elif kind == "fifo":
        out = str(tmp_path / "fifo")
        os.mkfifo(out)
    elif kind == "link to a file":
        (tmp_path / "file").write_text("")
        out = str(tmp_path / "link")
        os.symlink(tmp_path / "file", out)
    else:
        out = str(tmp_path / "out")
        os.mkdir(out)
        (tmp_path / "out" / "cards").write_text("")
    assert main(["calibrate", "p2", "-o", out, "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: -o ") and "a directory is needed" in err, err
    if kind != "file in place of cards/":  # --model-error writes no cards/
        assert main(["calibrate", "--model-error", "-o", out, "-q"]) == 2
        assert "a directory is needed" in capsys.readouterr().err


def test_row_value_units():
    from sdbench.records import make_row

    r = make_row("x", "read", 32768, [10_000_000])  # 32 KiB in 10 ms
    assert row_value(r, "ms") == pytest.approx(10.0)
    assert row_value(r, "KiB/s") == pytest.approx(3200.0)
    assert row_value(r, "MB/s") == pytest.approx(3.2768)
    assert row_value(r, "us") == pytest.approx(10000.0)


# ---- fit groups as data: a regression of the shipped group declarations --------------------------------------

P2_CARDS = ("sandisk-industrial-16gb", "lexar-v30-64gb", "lexar-blue-128gb", "samsung-evo-128gb",
            "sandisk-switch-128gb", "sandisk-extreme-64gb", "samsung-pro-endurance-128gb", "amazon-basics-64gb",
            "pny-16gb")
P2_SCEN = tuple(f"p2-spi25-350mhz-{c}" for c in P2_CARDS)
P2_ROWS = ("Mount", "File Open", "Raw Read 1x512B", "Raw Read 64x (32KB)", "Raw Write 1x512B", "Raw Write 64x (32KB)")
P2_TRAIN = {s: [r for r in P2_ROWS if r != "File Open"] for s in P2_SCEN}
for _s in ("p2-spi25-350mhz-lexar-v30-64gb", "p2-spi25-350mhz-samsung-evo-128gb", "p2-spi25-350mhz-pny-16gb"):
    P2_TRAIN[_s].insert(1, "File Open")
P2_TRAIN["p2-spi25-350mhz-samsung-evo-128gb"] = P2_TRAIN["p2-spi25-350mhz-samsung-evo-128gb"][:4]
#: the cards whose published File Write 32KB row is a train row (it fits their one-sector write busy)
for _s in ("p2-spi25-350mhz-lexar-v30-64gb", "p2-spi25-350mhz-samsung-evo-128gb", "p2-spi25-350mhz-pny-16gb"):
    P2_TRAIN[_s].append("File Write 32KB")
ESPIDF = "espidf-esp32-sdmmc4-40mhz"
S3_SPI = "esp32s3-spi20mhz,esp32s3-usbmsc-spi20mhz"
PI_CARDS = ("samsung-pro-plus-32gb", "samsung-evo-plus-32gb", "sandisk-extreme-16gb", "sandisk-ultra-16gb",
            "lexar-professional-a2-128gb")
PI4 = tuple(f"pidramble-4b-{c}" for c in PI_CARDS)
PI2 = ("pidramble-2b-samsung-pro-plus-32gb", "pidramble-2b-sandisk-ultra-16gb")
PI_RANDREAD = "{name='iozone -I 4k random', rw='randread', bs=4096, offset=2147483648, size=104857600, number_ios=4096}"
PI_ROWS = ("hdparm -t read", "dd conv=fsync write", "iozone -I 4k random read")

#: the reviewed fit groups, in `sdbench calibrate --list` order; params are (target, field, lo, hi, start,
#: prior_weight, prior_scale); rows are the (scenario, row) train rows of the shipped measurements each group fits
GROUPS = {
    "espidf-esp32": dict(
        description="ESP-IDF perf_benchmark card on ESP32 SDMMC 4-bit 40 MHz (SD raw rows)",
        scenarios=(ESPIDF,), host="esp32-sdmmc",
        params=((f"card:{ESPIDF}", "read_access_us", 0, 5000, None, 0.0, 1.0),
                (f"card:{ESPIDF}", "write_busy_end_us", 0, 20000, None, 0.0, 1.0),
                (f"card:{ESPIDF}", "merge_base_ms", 0, 2000, None, 0.01, 1000.0),
                (f"card:{ESPIDF}", "merge_copy_us_per_kib", 0, 2000, None, 0.0, 1.0),
                (f"card:{ESPIDF}", "first_write_ms", 0, 2000, None, 0.0, 1.0)),
        restrict=("espidf.parts=['sd_raw']",),
        rows=[(ESPIDF, f"SD raw {op} [{k} kB label]") for k in (16, 32, 48, 64) for op in ("write", "read")],
        host_rows=[],
        grid=(("update_block_bytes", (4194304.0, 6291456.0, 8388608.0, 10485760.0, 12582912.0, 16777216.0)),
              ("initial_update_fill_bytes", tuple(k * 524288.0 for k in range(32)))),
        grid_linear=("merge_base_ms", "merge_copy_us_per_kib", "first_write_ms"),
        grid_max=("initial_update_fill_bytes", "update_block_bytes"), staged=False, sequence=()),
    "espidf-esp32-read": dict(
        description="perf_benchmark card: read access vs inter-block gap, from the raw and FAT tiny reads",
        scenarios=(ESPIDF,), host="esp32-sdmmc",
        params=((f"card:{ESPIDF}", "read_access_us", 0, 5000, None, 0.0, 1.0),
                (f"card:{ESPIDF}", "read_block_gap_us", 0, 100, None, 0.0, 1.0)),
        restrict=("espidf.parts=['sd_raw', 'sd_fatfs']", "espidf.sd_modes=['new_file']", "espidf.runs=10"),
        rows=[(ESPIDF, "SD raw read [64 kB label]"), (ESPIDF, "SD FATFS (new file): read tiny size")],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "espidf-esp32-erase": dict(
        description="perf_benchmark card: ERASE busy, from the SD LittleFS (new file) 64 KiB write row",
        scenarios=(ESPIDF,), host="esp32-sdmmc",
        params=((f"card:{ESPIDF}", "erase_busy_us", 0, 100000, 18000, 0.0, 1.0),),
        restrict=("espidf.parts=['sd_littlefs']", "espidf.sd_modes=['new_file']"),
        rows=[(ESPIDF, "SD LittleFS (new file): write target size")],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "espidf-esp32-flash": dict(
        description="ESP32 internal SPI flash through wear levelling (SPI Flash raw rows) and esp_flash's per-call "
                    "cost (SPIFFS read)",
        scenarios=("espidf-esp32-spiflash",), host="esp32-flash",
        params=(("flash-chip:espidf-esp32-spiflash", "byte_program_next_typ_us", 0, 50, None, 0.0, 1.0),
                ("flash-host:espidf-esp32-spiflash", "cmd_overhead_cycles", 0, 100000, None, 0.0, 1.0),
                ("flash-host:espidf-esp32-spiflash", "op_overhead_cycles", 0, 1000000, None, 0.0, 1.0)),
        restrict=("espidf.parts=['flash_raw', 'flash_spiffs']",),
        rows=[("espidf-esp32-spiflash", "SPI Flash raw write"), ("espidf-esp32-spiflash", "SPI Flash raw read"),
              ("espidf-esp32-spiflash", "SPI SPIFFS (new file): read target size")],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "p2": dict(
        description="Propeller 2 benchmark cards, SPI 25 MHz (host p2-350mhz shared)",
        scenarios=P2_SCEN, host="p2-350mhz",
        params=(("host", "block_cycles", 0, 60000, None, 0.0, 1.0),
                ("host", "fs_open_cycles", 0, 2_000_000, None, 0.0, 1.0))
        + tuple(p for s in P2_SCEN for p in ((f"card:{s}", "init_ms", 0, 5000, None, 0.0, 1.0),
                                             (f"card:{s}", "read_access_us", 0, 20000, None, 0.0, 1.0),
                                             (f"card:{s}", "read_block_gap_us", 0, 2000, None, 0.0, 1.0),
                                             (f"card:{s}", "write_busy_end_us", 0, 100000, None, 0.0, 1.0),
                                             (f"card:{s}", "write_busy_block_us", 0, 100000, None, 0.0, 1.0))
                       # the one-sector busy only where a File Write train row fits it (the others hold it)
                       + (((f"card:{s}", "write_busy_single_us", 0, 100000, None, 0.0, 1.0),)
                          if "File Write 32KB" in P2_TRAIN[s] else ())),
        restrict=("p2.metrics=['Mount', 'File Open', 'Raw Read 1x512B', 'Raw Read 64x (32KB)', 'Raw Write 1x512B', "
                  "'Raw Write 64x (32KB)', 'File Write']",),
        rows=[(s, r) for s in P2_SCEN for r in P2_TRAIN[s]],
        host_rows=[("p2-spi25-350mhz-lexar-v30-64gb", "File Open"), ("p2-spi25-350mhz-samsung-evo-128gb", "File Open"),
                   ("p2-spi25-350mhz-pny-16gb", "File Open")],
        grid=(), grid_linear=(), grid_max=None, staged=True,
        sequence=(("init_ms", "Mount"), ("read_access_us", "Raw Read 1x512B"),
                  ("read_block_gap_us", "Raw Read 64x (32KB)"), ("write_busy_end_us", "Raw Write 1x512B"),
                  ("write_busy_block_us", "Raw Write 64x (32KB)"), ("write_busy_single_us", "File Write 32KB"))),
    "esp32s3-spi": dict(
        description="ESP32-S3 SDSPI 20 MHz card: board raw rows and the bridge's single-sector rows (one card)",
        scenarios=("esp32s3-spi20mhz", "esp32s3-usbmsc-spi20mhz"), host="esp32s3-sdspi",
        params=(("host", "block_cycles", 0, 100000, 8000, 0.0, 1.0),
                (f"card:{S3_SPI}", "read_access_us", 0, 20000, 250, 0.0, 1.0),
                (f"card:{S3_SPI}", "write_busy_single_us", 0, 100000, 1000, 0.0, 1.0),
                (f"card:{S3_SPI}", "write_busy_end_us", 0, 100000, 1500, 0.0, 1.0)),
        restrict=("usbmsc.rows=['single-sector write', 'single-sector read']",),
        rows=[("esp32s3-spi20mhz", "raw sectors write"), ("esp32s3-spi20mhz", "raw sectors read"),
              ("esp32s3-usbmsc-spi20mhz", "USB MSC single-sector write"),
              ("esp32s3-usbmsc-spi20mhz", "USB MSC single-sector read")],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "esp32s3-sdmmc": dict(
        description="esp32s3-sdmmc4-40mhz: raw sector read/write",
        scenarios=("esp32s3-sdmmc4-40mhz",), host="esp32s3-sdmmc",
        params=(("card:esp32s3-sdmmc4-40mhz", "read_access_us", 0, 20000, 250, 0.0, 1.0),
                ("card:esp32s3-sdmmc4-40mhz", "write_busy_end_us", 0, 100000, 1500, 0.0, 1.0)),
        restrict=(),
        rows=[("esp32s3-sdmmc4-40mhz", "raw sectors write"), ("esp32s3-sdmmc4-40mhz", "raw sectors read")],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "pidramble-4b-host": dict(
        description="Raspberry Pi 4 B (rpi4-sdhci, DDR50): per-request software cost from 4 KiB random reads",
        scenarios=PI4, host="rpi4-sdhci", params=(("host", "call_cycles", 0, 1500000, None, 0.0, 1.0),),
        restrict=(f"fio.jobs=[{PI_RANDREAD}]", "sd.card_params.read_access_us=238.973",
                  "sd.card_params.read_block_gap_us=2.88"),
        rows=[(s, "iozone -I 4k random read") for s in PI4],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "pidramble-4b": dict(
        description="Raspberry Pi Dramble cards on the Pi 4 B: read gap (hdparm), read access (iozone random read), "
                    "program busy per block (dd)",
        scenarios=PI4, host="rpi4-sdhci",
        params=tuple(p for s in PI4 for p in ((f"card:{s}", "read_block_gap_us", 0, 100, None, 0.0, 1.0),
                                              (f"card:{s}", "read_access_us", 0, 5000, None, 0.0, 1.0),
                                              (f"card:{s}", "write_busy_block_us", 0, 1000, None, 0.0, 1.0))),
        restrict=("fio.jobs=[{name='hdparm -t', rw='read', bs=2097152, offset=0, size=1073741824, number_ios=64}, "
                  "{name='dd conv=fsync', rw='write', bs=524288, offset=1073741824, size=419430400}, "
                  f"{PI_RANDREAD}]",),
        rows=[(s, r) for s in PI4 for r in PI_ROWS],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "pidramble-4b-random": dict(
        description="Raspberry Pi Dramble cards on the Pi 4 B: program time in the random-write area (iozone 4 KiB "
                    "random writes)",
        scenarios=PI4, host="rpi4-sdhci",
        params=tuple((f"card:{s}", "random_write_us", 0, 20000, 500, 0.0, 1.0) for s in PI4),
        restrict=("fio.jobs=[{name='iozone -I 4k random', rw='randwrite', bs=4096, offset=2147483648, "
                  "size=104857600, iodepth=1}]",),
        rows=[(s, "iozone -I 4k random write") for s in PI4],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "pidramble-2b": dict(
        description="Raspberry Pi 2 B (rpi2-sdhost, High Speed): per-request software cost from 4 KiB random reads",
        scenarios=PI2, host="rpi2-sdhost", params=(("host", "call_cycles", 0, 1500000, None, 0.0, 1.0),),
        restrict=(f"fio.jobs=[{PI_RANDREAD}]",),
        rows=[(s, "iozone -I 4k random read") for s in PI2],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "sdfat-rp2350-pio-sdio": dict(
        description='SdFat PIO SDIO on a Pico 2 (RP2350), Lexar SILVER PLUS: read clock, per-call cost, card per block',
        scenarios=('pico2-sdfat-sdio-150mhz-512b', 'pico2-sdfat-sdio-250mhz-32k'), host='rp2350-sdfat-pio-sdio',
        params=(('host', 'read_clock_ratio', 0.8, 1.0, None, 0.0, 1.0), ('host', 'fs_call_cycles', 0.0, 20000.0, None, 0.0, 1.0), ('card:pico2-sdfat-sdio-150mhz-512b,pico2-sdfat-sdio-250mhz-32k', 'read_block_gap_us', 0.0, 100.0, None, 0.0, 1.0), ('card:pico2-sdfat-sdio-150mhz-512b,pico2-sdfat-sdio-250mhz-32k', 'write_busy_block_us', 0.0, 500.0, None, 0.0, 1.0)),
        restrict=('sdfat_bench.read_passes=1',),
        rows=[('pico2-sdfat-sdio-150mhz-512b', 'sdfat write 512 B pass 2'), ('pico2-sdfat-sdio-150mhz-512b', 'sdfat read 512 B pass 1'), ('pico2-sdfat-sdio-250mhz-32k', 'sdfat write 32768 B pass 2'), ('pico2-sdfat-sdio-250mhz-32k', 'sdfat read 32768 B pass 1')],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "sdfat-rp2040-pio-sdio": dict(
        description="SdFat PIO SDIO on a Pico and a Metro (RP2040): PIO read clock, each card's busy per block",
        scenarios=('pico-sdfat-pio-sdio-133mhz', 'metro-rp2040-sdfat-pio-sdio-150mhz'), host='rp2040-sdfat-pio-sdio',
        params=(('host', 'read_clock_ratio', 0.8, 1.0, None, 0.0, 1.0), ('card:pico-sdfat-pio-sdio-133mhz', 'write_busy_block_us', 0.0, 500.0, None, 0.0, 1.0), ('card:metro-rp2040-sdfat-pio-sdio-150mhz', 'write_busy_block_us', 0.0, 500.0, None, 0.0, 1.0)),
        restrict=('sdfat_bench.read_passes=1',),
        rows=[('pico-sdfat-pio-sdio-133mhz', 'sdfat write 512 B pass 2'), ('pico-sdfat-pio-sdio-133mhz', 'sdfat read 512 B pass 1'), ('metro-rp2040-sdfat-pio-sdio-150mhz', 'sdfat write 512 B pass 2'), ('metro-rp2040-sdfat-pio-sdio-150mhz', 'sdfat read 512 B pass 1')],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "sdfat-rp2040-spi": dict(
        description="SdFat dedicated SPI on an RP2040, 511-byte calls: the PL022's gap between bytes",
        scenarios=('rp2040-sdfat-dedicated-spi-511b',), host='rp2040-sdfat-spi',
        params=(('host', 'spi_frame_gap_clocks', 0.0, 8.0, None, 0.0, 1.0),),
        restrict=('sdfat_bench.read_passes=1',),
        rows=[('rp2040-sdfat-dedicated-spi-511b', 'sdfat write 511 B pass 2'), ('rp2040-sdfat-dedicated-spi-511b', 'sdfat read 511 B pass 1')],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
    "sdfat-teensy36-sdioex": dict(
        description="Kingston 2 GB on a Teensy 3.6 (SdFatSdioEX, 45 MHz): the card's gap between read blocks",
        scenarios=('teensy36-sdfatsdioex-45mhz-sweep',), host='teensy36-sdfatsdioex',
        params=(('card:teensy36-sdfatsdioex-45mhz-sweep', 'read_block_gap_us', 0.0, 200.0, None, 0.0, 1.0),),
        restrict=(),
        rows=[('teensy36-sdfatsdioex-45mhz-sweep', 'sdfat read 512 B'), ('teensy36-sdfatsdioex-45mhz-sweep', 'sdfat read 1024 B'), ('teensy36-sdfatsdioex-45mhz-sweep', 'sdfat read 2048 B'), ('teensy36-sdfatsdioex-45mhz-sweep', 'sdfat read 4096 B'), ('teensy36-sdfatsdioex-45mhz-sweep', 'sdfat read 8192 B'), ('teensy36-sdfatsdioex-45mhz-sweep', 'sdfat read 16384 B'), ('teensy36-sdfatsdioex-45mhz-sweep', 'sdfat read 32768 B')],
        host_rows=[], grid=(), grid_linear=(), grid_max=None, staged=False, sequence=()),
}


def _facts(g, ev):
    """A fit group's content in the form of GROUPS (rows: the train rows it selects from the measurements)."""
    rows = [(s, m.row) for s, ms in ev.targets.items() for m in ms]
    return dict(description=g.description, scenarios=g.scenarios, host=g.host,
                params=tuple((p.target, p.name, p.lo, p.hi, p.start, p.prior_weight, p.prior_scale) for p in g.params),
                restrict=g.restrict, rows=rows, host_rows=[(s, r) for s, r in rows if (s, r) in g.host_rows],
                grid=g.grid, grid_linear=g.grid_linear, grid_max=g.grid_max, staged=g.staged, sequence=g.sequence)


def test_shipped_fit_groups_are_the_reviewed_ones():
    from sdbench.calibrate.evaluation import _Evaluator

    gs = groups()
    assert list(gs) == list(GROUPS)
    meas = load_measurements()
    for name, g in gs.items():
        assert g.name == name
        facts = _facts(g, _Evaluator(g, meas))
        for key, want in GROUPS[name].items():
            assert facts[key] == want, (name, key)
            if key == "grid":  # grid values are set as they are, in the card's field type (float)
                assert repr(facts[key]) == repr(want), (name, key)


def test_fit_group_rows_are_train_rows_of_builtin_scenarios():
    from sdbench.scenarios import builtin_names

    train = {(m.scenario, m.row) for m in load_measurements() if m.split == "train" and m.value is not None}
    known = set(builtin_names())
    for g in groups().values():
        assert set(g.scenarios) <= known, g.name
        for pair in g.rows:  # every declared row is fitted: a typo in a label would drop it silently
            assert pair in train, (g.name, pair)
        assert set(g.host_rows) <= set(g.rows), g.name


#: per scenario of the shipped measurements: (raw, bridge, file) rows, train and withheld alike
LEVEL_COUNTS = {
    "espidf-esp32-sdmmc4-40mhz": (8, 0, 32), "espidf-esp32-spiflash": (2, 0, 24),
    **{f"p2-spi25-350mhz-{c}": (5, 0, 3) for c in P2_CARDS if c != "samsung-evo-128gb"},
    "p2-spi25-350mhz-samsung-evo-128gb": (3, 0, 3),
    **{f"p2-spi25-250mhz-{c}": (1, 0, 2) for c in ("lexar-blue-128gb", "samsung-pro-endurance-128gb",
                                                   "amazon-basics-64gb")},
    "esp32s3-spi20mhz": (2, 0, 0), "esp32s3-sdmmc4-40mhz": (2, 0, 0),
    "esp32s3-usbmsc-spi20mhz": (0, 5, 0), "esp32s3-usbmsc-sdmmc4-40mhz": (0, 3, 0),
    # the Raspberry Pi Dramble table: hdparm reads the device, dd and iozone go through ext4
    **{s: (1, 0, 3) for s in PI4 + PI2},
    # the published SdFat bench setups: file-level rows only (a row per pass or per buffer size)
    "teensy40-sdfat-fifo-sdio": (0, 0, 4),
    "teensy36-sdfat-fifo-sdio": (0, 0, 4),
    "teensy41-sdfat-dma-sdio-sweep": (0, 0, 14),
    "teensy41-sdfat-dedicated-spi-sweep": (0, 0, 4),
    "teensy36-sdfatsdioex-45mhz-sweep": (0, 0, 14),
    "teensy36-sdfatsdio-dma-22mhz-sweep": (0, 0, 14),
    "pico-sdfat-pio-sdio-133mhz": (0, 0, 4),
    "metro-rp2040-sdfat-pio-sdio-150mhz": (0, 0, 4),
    "rp2040-sdfat-dedicated-spi-511b": (0, 0, 4),
    "pico2-sdfat-sdio-150mhz-512b": (0, 0, 4),
    "pico2-sdfat-sdio-250mhz-32k": (0, 0, 4),
    "pico2-sdfat-sdio-150mhz-64b": (0, 0, 4),
}


def test_row_levels_are_declared_per_scenario_and_row():
    from sdbench.calibrate import Measurement, row_level
    from sdbench.calibrate.fit_groups import _levels

    meas = load_measurements()
    counts: dict[str, list[int]] = {}
    for m in meas:
        counts.setdefault(m.scenario, [0, 0, 0])[("raw", "bridge", "file").index(row_level(m))] += 1
    assert {s: tuple(c) for s, c in counts.items()} == LEVEL_COUNTS
    by_level = {}
    for m in meas:
        by_level.setdefault((row_level(m), m.split), 0)
        by_level[(row_level(m), m.split)] += 1
    assert by_level == {("raw", "train"): 64, ("raw", "withheld"): 3, ("bridge", "train"): 2,
                        ("bridge", "withheld"): 6, ("file", "train"): 118, ("file", "withheld"): 70}
    # every declared row is a published row (a typo would make it file-level)
    assert set(_levels()) <= {(m.scenario, m.row) for m in meas}
    # the level is the declaration's, not the label's: an undeclared row is file-level whatever it says
    odd = Measurement("esp32s3-spi20mhz", "raw sectors write (other card)", "write", 0, 1, 1.0, "MB/s", "train", "",
                      "")
    assert row_level(odd) == "file"


def test_groups_are_read_once_and_handed_out_as_copies():
    a = groups()
    a.pop("p2")
    assert "p2" in groups()
    assert groups()["p2"] is groups()["p2"]


def _group_table():
    return {"order": 1, "description": "d", "host": "esp32s3-sdmmc",
            "scenario": [{"name": "esp32s3-sdmmc4-40mhz", "rows": ["raw sectors write"],
                          "params": [{"field": "read_access_us", "lo": 0, "hi": 20000}]}]}


@pytest.mark.parametrize("change,message", [
    (lambda t: t.update(colour="red"), "fits/x.toml: unknown option colour (known: "),
    (lambda t: t.pop("host"), "fits/x.toml: host is required"),
    (lambda t: t["scenario"][0].pop("rows"), "fits/x.toml: scenario[0].rows is required"),
    (lambda t: t["scenario"][0]["params"][0].pop("hi"), "fits/x.toml: scenario[0].params[0].hi is required"),
    (lambda t: t.update(order=0), "fits/x.toml: order = 0 is below the minimum 1"),
    (lambda t: t["scenario"][0]["params"][0].update(lo="zero"),
     "fits/x.toml: scenario[0].params[0].lo: expected a number, got 'zero'"),
    (lambda t: t["scenario"][0]["params"][0].update(kind="bus"), "fits/x.toml: scenario[0].params[0].kind = 'bus' "
                                                                  "is not one of card, host, flash-chip, flash-host"),
    (lambda t: t["scenario"][0]["params"][0].update(field="read_acess_us"),
     "fits/x.toml: scenario[0].params[0]: 'read_acess_us' is not a field of a card profile"),
    (lambda t: t["scenario"][0]["params"][0].update(lo=5, hi=5), "lo 5 must be below hi 5"),
    (lambda t: t["scenario"][0]["params"][0].update(start=30000), "start 30000 is outside [0, 20000]"),
    (lambda t: t["scenario"][0]["params"][0].update(kind="host", field="block_cycles"),
     "kind host is the group's host"),
    (lambda t: t["scenario"][0].update(rows=[]), "rows must not be empty"),
    (lambda t: t["scenario"][0].update(rows=["a", "a"]), "rows names 'a' twice"),
    (lambda t: t["scenario"][0].update(host_rows=["b"]), "host row 'b' is not one of its rows"),
    (lambda t: t["scenario"].append(dict(t["scenario"][0])), "scenario 'esp32s3-sdmmc4-40mhz' is listed twice"),
    (lambda t: t.update(scenario=[]), "a group needs at least one scenario"),
    (lambda t: t.update(method="grid"), "grid tables belong to method = \"grid\""),
    (lambda t: t.update(grid=[{"field": "update_block_bytes", "values": [1.0]}]), "grid tables belong to method"),
    (lambda t: t.update(grid_linear=["read_access_us"]), "grid_linear belongs to method = \"grid\""),
    (lambda t: t.update(method="staged"), "sequence belongs to method = \"staged\""),
    (lambda t: t["scenario"][0].update(host_rows=["raw sectors write"]), "host_rows belong to method = \"staged\""),
    (lambda t: t.update(method="grid", grid=[{"field": "update_block_bytes", "values": [1.0], "below": "nope"}]),
     "below = 'nope' is not another grid field"),
    (lambda t: t.update(method="grid", grid=[{"field": "update_block_bytes", "values": [1.0]}],
                        grid_linear=["merge_base_ms"]), "'merge_base_ms' is not a fitted card field"),
    (lambda t: t.update(method="staged", sequence=[{"field": "read_access_us", "row": "raw sectors write"}]),
     "declare it"),
])
def test_bad_fit_group_files_are_one_line_errors(change, message):
    from sdbench.calibrate import parse_group
    from sdbench.errors import ConfigError

    table = _group_table()
    assert parse_group("x", table).rows == (("esp32s3-sdmmc4-40mhz", "raw sectors write"),)
    change(table)
    with pytest.raises(ConfigError) as e:
        parse_group("x", table)
    text = str(e.value)
    assert message in text and "\n" not in text
    assert text.startswith("fits/x.toml: ")


def test_a_staged_scenario_declares_the_fields_of_the_sequence_rows_it_has():
    from sdbench.calibrate import parse_group
    from sdbench.errors import ConfigError

    table = _group_table()
    table.update(method="staged", params=[{"kind": "host", "field": "block_cycles", "lo": 0, "hi": 1000}],
                 sequence=[{"field": "read_access_us", "row": "raw sectors write"},
                           {"field": "write_busy_single_us", "row": "raw sectors read"}])
    gap = {"field": "read_block_gap_us", "lo": 0, "hi": 100}
    single = {"field": "write_busy_single_us", "lo": 0, "hi": 100000}
    table["scenario"][0]["params"].append(gap)
    table["scenario"].append({"name": "esp32s3-spi20mhz", "rows": ["raw sectors write", "raw sectors read"],
                              "params": [{"field": "read_access_us", "lo": 0, "hi": 20000}, gap, single]})
    # the first scenario lacks "raw sectors read": it need not declare write_busy_single_us (its card may hold it)
    assert parse_group("x", table).staged
    table["scenario"][1]["params"].remove(single)
    with pytest.raises(ConfigError, match="scenario esp32s3-spi20mhz: method staged needs its card fields "
                                          "write_busy_single_us"):
        parse_group("x", table)


def test_group_files_are_read_from_the_fits_folder(tmp_path, monkeypatch):
    import tomllib as _toml

    from sdbench.calibrate import fit_groups
    from sdbench.errors import ConfigError

    (tmp_path / "fits").mkdir()
    shipped = (DATA / "fits" / "esp32s3-sdmmc.toml").read_text()
    order = _toml.loads(shipped)["order"]
    assert f"order = {order}\n" in shipped
    shipped = shipped.replace(f"order = {order}\n", "order = 5\n")
    (tmp_path / "fits" / "b.toml").write_text(shipped)
    (tmp_path / "fits" / "a.toml").write_text(shipped.replace("order = 5", "order = 7"))
    (tmp_path / "fits" / "levels.toml").write_text("not a group = 1\n")  # the levels file is no group
    (tmp_path / "fits" / "notes.txt").write_text("ignored")
    monkeypatch.setattr(fit_groups, "DATA", tmp_path)  # where the groups are read from
    fit_groups._shipped_groups.cache_clear()
    try:
        assert list(groups()) == ["b", "a"]  # in their declared order, named by their files
        assert groups()["a"].params == groups()["b"].params
        (tmp_path / "fits" / "a.toml").write_text(shipped)
        fit_groups._shipped_groups.cache_clear()
        with pytest.raises(ConfigError, match="fit groups a and b have the same order 5"):
            groups()
        (tmp_path / "fits" / "a.toml").write_text("order = [")
        fit_groups._shipped_groups.cache_clear()
        with pytest.raises(ConfigError, match=r"^fits/a\.toml: invalid TOML"):
            groups()
    finally:
        fit_groups._shipped_groups.cache_clear()


# ---- the fit's uncertainty --------------------------------------------------------------------------------------

def test_rounding_of_published_figures():
    from sdbench.calibrate import MEASUREMENT_REL_SD, Measurement, measurement_rel_sd, rounding_rel_sd

    def m(value, text=""):
        return Measurement("s", "r", "read", 0, 1, value, "ms", "train", "", "", text)

    assert rounding_rel_sd(m(13.38, "13.380")) == pytest.approx(0.001 / 12 ** 0.5 / 13.38)
    assert rounding_rel_sd(m(13.38)) == pytest.approx(0.01 / 12 ** 0.5 / 13.38)  # no text: the float's digits
    assert rounding_rel_sd(m(50.0, "50")) == pytest.approx(1 / 12 ** 0.5 / 50)
    assert measurement_rel_sd(m(2393.0, "2393")) == MEASUREMENT_REL_SD  # the stated floor
    assert measurement_rel_sd(m(3.0, "3")) == pytest.approx(1 / 12 ** 0.5 / 3)  # coarser than the floor
    assert next(x for x in load_measurements() if x.row == "SD raw write [32 kB label]").value_text == "13.380"


def test_param_sd_exact_overdetermined_and_undetermined():
    import numpy as np

    from sdbench.calibrate import SD_MEASUREMENT, SD_NOT_DETERMINED, SD_RESIDUALS, param_sd

    # exactly determined: the stated uncertainty, propagated through J
    jac = np.array([[2.0, 0.0], [0.0, 0.5]])
    sd, status = param_sd(jac, np.zeros(2), np.array([0.01, 0.01]))
    assert sd == pytest.approx([0.005, 0.02]) and status == [SD_MEASUREMENT] * 2
    # four rows of one field that disagree by ±10 %: s² from the residuals, s / (√n |J|)
    res = np.array([0.1, -0.1, 0.1, -0.1])
    sd, status = param_sd(np.ones((4, 1)), res, np.full(4, 0.01))
    assert sd[0] == pytest.approx(np.sqrt(0.04 / 3 / 4)) and status == [SD_RESIDUALS]
    # the same rows agreeing: the stated uncertainty wins
    sd, status = param_sd(np.ones((4, 1)), np.zeros(4), np.full(4, 0.01))
    assert sd[0] == pytest.approx(0.005) and status == [SD_MEASUREMENT]
    # a field no row depends on, and two fields the rows cannot tell apart
    sd, status = param_sd(np.array([[1.0, 0.0], [1.0, 0.0]]), np.zeros(2), np.full(2, 0.01))
    assert sd[1] is None and status[1] == SD_NOT_DETERMINED
    sd, status = param_sd(np.array([[1.0, 1.0], [2.0, 2.0]]), np.zeros(2), np.full(2, 0.01))
    assert sd == [None, None] and status == [SD_NOT_DETERMINED] * 2


def test_a_field_told_only_with_another_is_held_apart_for_the_others_sigma():
    import numpy as np

    from sdbench.calibrate import MAX_REL_SD, SD_MEASUREMENT, param_sd
    from sdbench.calibrate.uncertainty import _held_apart_sd

    # two rows that see a merge's fixed part b and its copy cost c almost only as b + 1000 c (the fixed part
    # barely moves them apart): marginally both swing, with b held the rows tell c to the stated 1 %
    jac = np.array([[1.0, 1000.0], [1.0 + 1e-7, 1000.0]])
    values = np.array([0.5, 200.0])
    marginal, _ = param_sd(jac, np.zeros(2), np.full(2, 0.01))
    assert marginal[0] / values[0] >= MAX_REL_SD and marginal[1] / values[1] > 0.5
    out = _held_apart_sd(jac, np.zeros(2), np.full(2, 0.01), values, [3, 7])
    assert set(out) == {3, 7}
    assert out[3][0] == pytest.approx(marginal[0])           # the report keeps its marginal σ
    c_sd, c_status = out[7]
    assert c_status == SD_MEASUREMENT
    assert c_sd == pytest.approx(0.01 / (1000 * np.sqrt(2)), rel=1e-6)   # two rows, each ±1 %, slope 1000
    # nothing weak: the same as param_sd
    jac2 = np.array([[2.0, 0.0], [0.0, 0.5]])
    assert _held_apart_sd(jac2, np.zeros(2), np.full(2, 0.01), np.array([1.0, 1.0]), [0, 1]) == {
        0: (pytest.approx(0.005), SD_MEASUREMENT), 1: (pytest.approx(0.02), SD_MEASUREMENT)}


def test_profiles_keep_their_comments_and_the_other_groups_fit_rel_sd(tmp_path):
    from sdbench.calibrate import write_profile
    from sdbench.stack.sd import load_card

    folder = tmp_path / "cards"
    folder.mkdir()
    (folder / "c.toml").write_text(
        "# fitted by `sdbench calibrate g1` from rows:\n#   r1: measured 1\n"
        "# fitted by `sdbench calibrate g2` from rows:\n#   r2: measured 2\n"
        "name = \"c\"\n# how fast it reads\nread_access_us = 200.0\nwrite_busy_end_us = 1_000.0\n"
        "default_speed_max_clock_hz = 25_000_000\nfit_rel_sd = { read_access_us = 0.5, write_busy_end_us = 0.1 }\n"
        "# the end\n")
    write_profile("card", "c", {"read_access_us": 250.0}, tmp_path,
                  ["fitted by `sdbench calibrate g1` from new rows:", "  r1: measured 3"], {"read_access_us": 0.02})
    text = (folder / "c.toml").read_text()
    assert text.splitlines()[:4] == ["# fitted by `sdbench calibrate g1` from new rows:", "#   r1: measured 3",
                                     "# fitted by `sdbench calibrate g2` from rows:", "#   r2: measured 2"]
    assert "# how fast it reads\nread_access_us = 250.0\n" in text
    assert "default_speed_max_clock_hz = 25_000_000\n" in text  # an unchanged line stays as written
    assert text.endswith("# the end\n")
    card = load_card(str(folder / "c.toml"))
    # this fit's field has its new σ; the other group's field keeps what it recorded
    assert card.fit_rel_sd == {"read_access_us": 0.02, "write_busy_end_us": 0.1}
    # a field fitted again without a σ (not determined) loses its old one
    write_profile("card", "c", {"write_busy_end_us": 900.0}, tmp_path, ["fitted by `sdbench calibrate g2` again"])
    assert load_card(str(folder / "c.toml")).fit_rel_sd == {"read_access_us": 0.02}
    assert "# fitted by `sdbench calibrate g2` again" in (folder / "c.toml").read_text()
