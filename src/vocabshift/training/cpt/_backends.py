"""What EmbeddingOnlyCallback supports under each sharding backend, read where the Trainer decides it.

See the README's training section for what is tested.
"""

from __future__ import annotations

from typing import Any

from ...errors import TrainingSetupError

__all__ = ["refuse_backend"]


def refuse_backend(callback: Any) -> None:
    """What each sharding backend supports (see the README's training section for what is tested)."""
    backend, plugin = _sharding_backend()
    if backend is None:
        return
    if callback.head_learning_rate is not None or callback.second_stage is not None:
        raise TrainingSetupError(
            f"EmbeddingOnlyCallback's head_learning_rate and second_stage work on one process and with DDP, not under "
            f"{backend} (the optimizer steps inside backward() under DeepSpeed, and gradient hooks do not fire under "
            "FSDP): drop them, or run them with DDP."
        )
    if callback.rows == "all":
        return
    if backend in ("DeepSpeed ZeRO-3", "FSDP1"):
        raise TrainingSetupError(
            f"EmbeddingOnlyCallback(rows={callback.rows!r}) cannot split rows off embedding matrices that {backend} "
            "partitions or flattens: use FSDP2 (fsdp_version=2) or DeepSpeed ZeRO-1/2, or rows='all'."
        )
    if backend == "FSDP2" and getattr(plugin, "cpu_ram_efficient_loading", False):
        raise TrainingSetupError(
            f"EmbeddingOnlyCallback(rows={callback.rows!r}) cannot run with FSDP2's cpu_ram_efficient_loading: "
            "accelerate reloads the sharded model from its state_dict(), in which the split rows are folded into "
            "the matrices. Turn it off (fsdp_cpu_ram_efficient_loading: false, or "
            "FSDP_CPU_RAM_EFFICIENT_LOADING=false)."
        )


def _sharding_backend() -> tuple[str | None, Any]:
    """("DeepSpeed" | "DeepSpeed ZeRO-3" | "FSDP1" | "FSDP2" | None, the plugin), read where the Trainer decides it:
    the plugins in accelerate's state.

    (Neither `args.fsdp` nor ACCELERATE_USE_FSDP is enough: on a machine without GPUs the Trainer runs DDP with both.)
    """
    from accelerate.state import AcceleratorState

    state = AcceleratorState._shared_state
    plugins = state.get("deepspeed_plugins") or {}
    if plugins:
        three = any(getattr(p, "zero_stage", None) == 3 for p in plugins.values())
        return ("DeepSpeed ZeRO-3" if three else "DeepSpeed"), plugins
    fsdp = state.get("fsdp_plugin")
    return (None, None) if fsdp is None else (f"FSDP{getattr(fsdp, 'fsdp_version', 1)}", fsdp)
