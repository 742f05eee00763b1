"""sim/: simulated targets (host driver -> bus -> card / flash chip models) on a virtual clock."""
# Flash: NOR chip model and the ESP32 esp_flash driver model.  Wear levelling is media/wl.py.
from .esp_flash import EspFlashHostProfile, Esp32FlashDriver, load_esp_flash_host
from .esp_flash_raw import run_spiflash_raw, simulate_spiflash_raw
from .nor import (FlashChipProfile, NorChipConfig, NorCommandError, NorFlashChip, NorProgramError, NorStats,
                  list_chip_profiles, load_chip_profile)

__all__ = [
    "Esp32FlashDriver", "EspFlashHostProfile", "FlashChipProfile", "NorChipConfig", "NorCommandError",
    "NorFlashChip", "NorProgramError", "NorStats", "list_chip_profiles", "load_chip_profile",
    "load_esp_flash_host", "run_spiflash_raw", "simulate_spiflash_raw",
]
