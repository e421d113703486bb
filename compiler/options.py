"""The lowering's options: the choices of the program builders that are not the config's.

Every setting computes the same outputs (the lowerings are exact either way); the
defaults are the fastest measured.  :class:`LowerOptions` is what a caller passes in
(``compile_model(..., options=)``, ``compile_dynamic``, ``lower_graph``, ``lower_node``):
the :class:`ConvOptions` of the conv and dense lowering and the pooling lowering's two
choices.  The op registry's ``lower`` and ``bands`` facets (:mod:`.ops`) hand each builder
its part: ``options.conv`` to :func:`~.lower_conv.lower_conv` /
:func:`~.lower_conv.lower_conv_bands`, ``pool_separable`` / ``pool_gemm_copy`` to
:func:`~.lower_eltwise.lower_pool`.  ``for_config(cfg)`` gives a config's defaults (today
the same on every config); no module holds mutable switches.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..hw.config import VTAConfig
from .tiling import QUAD_ACC_RATIO

__all__ = ["ConvOptions", "LowerOptions"]


def _check_names(cls, overrides: dict) -> None:
    known = {f.name for f in fields(cls)}
    bad = sorted(set(overrides) - known)
    if bad:
        raise TypeError(f"unknown {cls.__name__} field(s) {bad}; known: {sorted(known)}")


def _diff(obj, default) -> list[str]:
    return [f"{f.name}={getattr(obj, f.name)}" for f in fields(obj)
            if getattr(obj, f.name) != getattr(default, f.name)]


@dataclass(frozen=True)
class ConvOptions:
    """Choices of the conv lowering that are not the config's (all exact: every setting
    computes the same outputs; the defaults are the fastest measured).

    Attributes:
        clearing_req: with ``ALU_REQUANT``, end each tile's bias-fused REQ as a clearing REQ
            (its ACC entries to 0) and skip the reset of the next tile of that ACC region
            the clear covered (False: every tile resets).
        keep_cleared: a clearing REQ of a tile smaller than its region's cleared extent
            keeps that extent (False: the extent becomes the tile's).
        step_req: on a REQ engine core, the last tile of a conv whose output blocks each
            complete in one step (depthwise) requantizes each block after its step
            (False: the stream of deferred steps).
        ob_loop: 1x1 convs whose tile pixels are one run in INP run a step's output blocks
            as a GEMM loop, one micro-op per input block (False: one per stored block).
        streamed_ib_major: streamed (non-resident) weights are stored input-block-major,
            like resident ones (False: output-block-major).
        w_chunk_beats: resident weight LOADs are requests of at most this many bus beats
            (whole blocks, at least one); also the first step's weight group size.
        quad_acc_ratio: a conv on a REQ engine core whose output takes more than this many
            times as many STORE beats as GEMM cycles gets four ACC regions
            (:func:`~.tiling.conv_tiling`).
        stream_request_cycles: cycles allowed per DMA request when judging whether a
            one-input-block step of streamed weights hides its load (a board's latency).
        retile_request_cycles: the same for resident weights' retiling (the ideal bus's
            request overhead).
        bias_load: start each tile's accumulator at the bias (+round) with one broadcast
            ACC LOAD per output block (``x_stride`` 0), instead of a GEMM reset and the
            bias ADD of the epilogue.  Slower on every preset: an ACC element
            (``BATCH*BLOCK_OUT*4`` bytes, pynq 64) is 8 bus beats on pynq's 8-byte bus and
            the compute unit waits for its own loads, against 2 micro-op cycles for reset
            + ADD (figures: bench/RESULTS.md); kept for cores with a wider bus or a
            broadcast load.
        tile_span: the tiler costs a depthwise or grouped conv's tile by the input blocks
            it reads (the union of its output blocks', one reduction step each;
            :func:`~.tiling.conv_tiling` ``tile_span``), so it takes tiles of one output
            block and many pixels (False: by one output block's blocks, the tiler before
            this option, whose tiles of several blocks and few pixels left MobileNet-v1's
            depthwise convs load-bound; ``step_req`` serves their last tiles).
        merge_stores: a tile of full-width rows whose blocks are stored after one REQ
            pass (not streamed) stores each run of side-by-side blocks with one STORE, a
            row per block (``x_stride`` the output's block pitch), so the write responses
            are waited for once per run, not once per block (False: one STORE per block).
    Raises:
        ValueError: a count below 1 or a negative ratio.
    """

    clearing_req: bool = True
    keep_cleared: bool = True
    step_req: bool = True
    ob_loop: bool = True
    streamed_ib_major: bool = True
    w_chunk_beats: int = 256
    quad_acc_ratio: float = QUAD_ACC_RATIO
    stream_request_cycles: int = 64
    retile_request_cycles: int = 8
    bias_load: bool = False
    tile_span: bool = True
    merge_stores: bool = True

    def __post_init__(self):
        for name in ("w_chunk_beats", "stream_request_cycles", "retile_request_cycles"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"ConvOptions.{name} must be >= 1, got {getattr(self, name)}")
        if self.quad_acc_ratio < 0:
            raise ValueError(f"ConvOptions.quad_acc_ratio must be >= 0, got "
                             f"{self.quad_acc_ratio}")

    @classmethod
    def for_config(cls, cfg: VTAConfig, **overrides) -> "ConvOptions":
        """The defaults for ``cfg`` (today the same on every config), with ``overrides``
        (field names).  Raises ``TypeError`` on an unknown name."""
        _check_names(cls, overrides)
        return cls(**overrides)

    def __str__(self) -> str:
        diff = _diff(self, ConvOptions())
        return "options: " + (", ".join(diff) if diff else "defaults")


@dataclass(frozen=True)
class LowerOptions:
    """The options of a whole-graph lowering, one field per program builder's choices.

    Attributes:
        conv: the conv / dense lowering's :class:`ConvOptions` (row bands included).
        pool_separable: a max-pool window with ``k < 2*s`` on both axes runs as a column
            pass in place, then a row pass (False: reset, copy and MAX per window element;
            :func:`~.lower_eltwise.lower_pool` ``separable``).
        pool_gemm_copy: on a core where :func:`~.lower_eltwise.pool_copy_ok` holds, the
            separable max-pool takes its input through INP loads and an identity GEMM
            (False: ACC8 loads; ``lower_pool``'s ``gemm_copy``).
    Raises:
        TypeError: ``conv`` is not a :class:`ConvOptions`.
    """

    conv: ConvOptions = field(default_factory=ConvOptions)
    pool_separable: bool = True
    pool_gemm_copy: bool = True

    def __post_init__(self):
        if not isinstance(self.conv, ConvOptions):
            raise TypeError(f"LowerOptions.conv must be a ConvOptions, got "
                            f"{type(self.conv).__name__}")

    @classmethod
    def for_config(cls, cfg: VTAConfig, **overrides) -> "LowerOptions":
        """The defaults for ``cfg`` (``conv``: :meth:`ConvOptions.for_config`), with
        ``overrides`` (field names).  Raises ``TypeError`` on an unknown name."""
        _check_names(cls, overrides)
        overrides.setdefault("conv", ConvOptions.for_config(cfg))
        return cls(**overrides)

    @classmethod
    def resolve(cls, options: "LowerOptions | None", cfg: VTAConfig) -> "LowerOptions":
        """``options``, or the defaults for ``cfg`` when None.  Raises ``TypeError`` when
        ``options`` is neither."""
        if options is None:
            return cls.for_config(cfg)
        if not isinstance(options, cls):
            raise TypeError(f"options must be a LowerOptions, got {type(options).__name__}")
        return options

    def __str__(self) -> str:
        diff = [f"conv.{d}" for d in _diff(self.conv, ConvOptions())]
        diff += [d for d in _diff(self, LowerOptions()) if not d.startswith("conv=")]
        return "lower options: " + (", ".join(diff) if diff else "defaults")
