"""``pynq.ps`` of the simulated board: ``Clocks`` (PL clocks, MHz) and ``ON_TARGET``."""

from __future__ import annotations

ON_TARGET = True
_board = None  # set by fakepynq.attach


def _get():
    if _board is None:
        raise RuntimeError("No Devices Found")
    return _board


class _ClocksMeta(type):
    """Class-level properties ``fclk0_mhz`` … ``fclk3_mhz``, as pynq's ``Clocks`` has."""


def _prop(i: int):
    def get(cls):
        return _get().fclk_mhz[i]

    def put(cls, mhz):
        _get().set_fclk(i, float(mhz))

    return property(get, put)


for _i in range(4):
    setattr(_ClocksMeta, f"fclk{_i}_mhz", _prop(_i))


class Clocks(metaclass=_ClocksMeta):
    """The PL clocks: ``Clocks.fclk0_mhz`` reads the frequency, assigning sets it (to the
    nearest the IO PLL's dividers make)."""
