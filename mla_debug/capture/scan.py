"""`md.scan(model, out)`: summarize every decoder layer of one forward, on this rank.

A capture records one layer whole; a scan records all of them, small. On entering, the scan finds the
decoder layers (``...layers.<N>``) and their attention modules (the name map's ``attention_attr``) and
hooks both; inside the block the model runs one forward; for the `call`-th call of each layer (0: the
first) the hooks summarize the residual stream entering and leaving the layer and the attention
module's input and output (`scan_types`: per-token norms, an evenly spaced column sample of the kept
tokens, a few whole rows, a checksum of the whole tensor). The summaries are computed inside the hooks,
on the tensors' device, so nothing the engine reuses or updates in place is held. On leaving without an
error the rank's folder is written under `out` (never over an existing one).

    with md.scan(model, "scans/tp2") as s:
        model(input_ids)
    s.path        # scans/tp2/rank0-of-1 (or rank<r>-of-<T> under torch.distributed)

A scan of DeepSeek-V3's 61 layers at 16 tokens holds about 4 MB per rank (see benchmarks/RESULTS.md);
`compare_scans` (in `mla_debug.explain`) then finds the first layer whose divergence its input does not
explain, and says how to capture that layer whole.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from .names import NameMap, builtin_maps, map_for_class, resolve_map
from .names.name_map import argument_value
from .recorder import _hf_config
from .roles import Shard
from .scan_maps import StreamRule, stream_rule
from .scan_store import write_rank_scan
from .scan_types import ScanManifest, ScanStep, StepSummary
from .store import rank_destination
from .tensor_facts import installed_versions, local_tensor

# Defaults that keep a 61-layer, 7168-wide model at 16 tokens under 5 MB per rank (benchmarks/RESULTS.md).
MAX_TOKENS = 64
COLUMNS = 256
ROWS = 1
_LAYER = re.compile(r"^(?P<prefix>(?:.*\.)?layers)\.(?P<index>\d+)$")
# Whole rows are kept for the outputs only: an input's rows are the previous layer's output rows.
_ROW_STEPS = (ScanStep.ATTN_OUTPUT, ScanStep.LAYER_OUTPUT)


def _tensor(value: Any) -> torch.Tensor | None:
    """A plain tensor (a DTensor's local shard) or None."""
    found, _ = local_tensor(value)
    return found if isinstance(value, torch.Tensor) else None


def _first_tensor(output: Any) -> torch.Tensor | None:
    """A module's output tensor: the output itself, or the first item of a tuple or list."""
    return _tensor(output[0] if isinstance(output, (tuple, list)) and output else output)


def checksum(x: torch.Tensor) -> str:
    """A digest of `x`'s bytes in row-major order: the plain and the position-weighted sum of its
    elements read as integers, modulo 2^64 (integer sums are exact in any order, so two devices agree)."""
    flat = x.detach().contiguous().reshape(-1)
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(flat.element_size())
    if as_int is None:
        raise ValueError(f"scan: cannot digest a tensor of dtype {x.dtype}")
    values = flat.view(as_int).to(torch.int64)
    weights = torch.arange(values.numel(), device=values.device, dtype=torch.int64) % 65521 + 1
    mask = (1 << 64) - 1
    return f"{int(values.sum()) & mask:016x}{int((values * weights).sum()) & mask:016x}"


def evenly_spaced(total: int, count: int) -> list[int]:
    """`count` indices spread over range(total), first and last included (all of them when count >= total)."""
    if count >= total:
        return list(range(total))
    if count == 1:
        return [total - 1]
    return sorted({round(i * (total - 1) / (count - 1)) for i in range(count)})


def sample_columns(features: int, count: int) -> list[int]:
    """`count` feature indices at a stride of features/count: for 7168 features and 256 columns a stride
    of 28, so the sample meets every 128-wide block at several offsets within it."""
    if count >= features:
        return list(range(features))
    return sorted({(i * features) // count for i in range(count)})


class ModelScan:
    """The context manager `md.scan(...)` returns; see the module docstring.

    Options: `names` (a name map, its key, or a dict; default: picked by the attention class),
    `engine` (whose decoder-layer convention to read, default the map's), `tokens` (kept rows; default
    all rows up to `max_tokens`, else `max_tokens` evenly spaced ones), `columns` (how many features are
    sampled), `rows` (how many whole rows of the outputs are kept: the last kept tokens), `layers`
    (which decoder layers; default all), `rank`/`tp_size` (default: torch.distributed), `call`, `note`.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        out: str | os.PathLike,
        *,
        names: NameMap | dict | str | None = None,
        engine: str | None = None,
        tokens: Iterable[int] | None = None,
        max_tokens: int = MAX_TOKENS,
        columns: int = COLUMNS,
        rows: int = ROWS,
        layers: Iterable[int] | None = None,
        rank: int | None = None,
        tp_size: int | None = None,
        call: int = 0,
        note: str = "",
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"scan: model must be a torch.nn.Module, got {type(model).__name__}")
        for label, value, least in (("max_tokens", max_tokens, 1), ("columns", columns, 1), ("rows", rows, 0), ("call", call, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"scan: {label} must be an int >= {least}, got {value!r}")
        self.model, self.call, self.note = model, call, note
        self.out, self.rank, self.tp_size, self.folder = rank_destination("scan", out, rank, tp_size)
        self.prefix, found = _decoder_layers(model)
        self.name_map = _pick_map(found, names)
        self.rule: StreamRule = stream_rule(engine or self.name_map.engine)
        if self.rule.refused:
            raise ValueError(f"scan: {self.rule.refused}")
        wanted = None if layers is None else {int(i) for i in layers}
        self.layers = {i: m for i, m in sorted(found.items()) if wanted is None or i in wanted}
        if wanted is not None and wanted - set(self.layers):
            raise ValueError(f"scan: layers {sorted(wanted - set(self.layers))} not found; the model has {sorted(found)}")
        self.attention = {}
        for i, layer in self.layers.items():
            attention = getattr(layer, self.name_map.attention_attr, None)
            if not isinstance(attention, torch.nn.Module):
                raise ValueError(
                    f"scan: {self.prefix}.{i} has no attention module '{self.name_map.attention_attr}' (name map "
                    f"{self.name_map.key!r}); pass names= with the right attention attribute"
                )
            self.attention[i] = attention
        self.given_tokens = None if tokens is None else [int(t) for t in tokens]
        if self.given_tokens is not None and (
            not self.given_tokens or min(self.given_tokens) < 0 or len(set(self.given_tokens)) != len(self.given_tokens)
        ):
            raise ValueError(f"scan: tokens must be distinct non-negative row indices, got {self.given_tokens}")
        self.max_tokens, self.n_columns, self.n_rows = max_tokens, columns, rows
        self.engine = engine or self.name_map.engine
        self.hf_config = _hf_config(model, next(iter(self.attention.values()), model))
        self.summaries: dict[tuple[int, ScanStep], StepSummary] = {}
        self.path: Path | None = None
        self._handles: list[Any] = []
        self._calls: dict[int, int] = {}
        self._inside: int | None = None
        self._tokens: list[int] | None = None
        self._columns: list[int] | None = None
        self._row_tokens: list[int] | None = None
        self._rows_total: int | None = None

    # -- hooks ---------------------------------------------------------------------------------------
    def __enter__(self) -> ModelScan:
        for i, layer in self.layers.items():
            self._handles.append(layer.register_forward_pre_hook(self._layer_pre(i), with_kwargs=True))
            self._handles.append(layer.register_forward_hook(self._layer_post(i)))
            attention = self.attention[i]
            pre = self._attention_hook(i, ScanStep.ATTN_INPUT, self._attention_input)
            self._handles.append(attention.register_forward_pre_hook(pre, with_kwargs=True))
            post = self._attention_hook(i, ScanStep.ATTN_OUTPUT, self._attention_output)
            self._handles.append(attention.register_forward_hook(post))
        return self

    def _layer_pre(self, index: int):
        def hook(module, args, kwargs):
            calls = self._calls.get(index, 0)
            self._calls[index] = calls + 1
            if calls != self.call:
                return None
            self._inside = index
            hidden = _tensor(argument_value(self.rule.hidden, args, kwargs))
            if hidden is None:
                raise ValueError(
                    f"scan: the call of {self.prefix}.{index} carries no hidden-states tensor (argument "
                    f"{self.rule.hidden}; rule of {self.rule.source})"
                )
            residual = _tensor(argument_value(self.rule.residual, args, kwargs)) if self.rule.residual else None
            stream = hidden if residual is None else hidden.float() + residual.float()
            self._summarize(index, ScanStep.LAYER_INPUT, stream, hidden.dtype, Shard.REPLICATED)
            return None

        return hook

    def _layer_post(self, index: int):
        def hook(module, args, output):
            if self._inside != index:
                return None
            self._inside = None
            if self.rule.output_pair:
                if not (isinstance(output, (tuple, list)) and len(output) == 2):
                    raise ValueError(
                        f"scan: {self.prefix}.{index} returned {type(output).__name__}, not the (hidden_states, residual) "
                        f"pair of {self.rule.source}"
                    )
                hidden, residual = _tensor(output[0]), _tensor(output[1])
                stream = hidden if residual is None else hidden.float() + residual.float()
                dtype = hidden.dtype
            else:
                stream = _first_tensor(output)
                dtype = stream.dtype if stream is not None else None
            if stream is None:
                raise ValueError(f"scan: {self.prefix}.{index} returned no tensor ({type(output).__name__})")
            self._summarize(index, ScanStep.LAYER_OUTPUT, stream, dtype, Shard.REPLICATED)
            return None

        return hook

    def _attention_hook(self, index: int, step: ScanStep, read):
        """A hook on layer `index`'s attention that summarizes `step` once, on the first attention call
        inside the layer's scanned call; `read(index, args, last)` gives the tensor and its shard, or None."""

        def hook(module, args, last):
            if self._inside != index or (index, step) in self.summaries:
                return None
            found = read(index, args, last)
            if found is not None:
                value, shard = found
                self._summarize(index, step, value, value.dtype, shard)
            return None

        return hook

    def _attention_input(self, index: int, args, kwargs) -> tuple[torch.Tensor, Shard]:
        hidden = _tensor(argument_value(self.name_map.hidden_arg, args, kwargs))
        if hidden is None:
            raise ValueError(
                f"scan: the call of {self.prefix}.{index}.{self.name_map.attention_attr} has no hidden states "
                f"(argument {self.name_map.hidden_arg})"
            )
        return hidden, Shard.REPLICATED

    def _attention_output(self, index: int, args, output) -> tuple[torch.Tensor, Shard] | None:
        value = _first_tensor(output)
        if value is None:
            return None
        return value, Shard.REPLICATED if self.name_map.row_output_reduced or self.tp_size == 1 else Shard.PARTIAL_SUM

    # -- summaries -----------------------------------------------------------------------------------
    def _choose(self, rows_total: int, features: int) -> None:
        if self.given_tokens is not None:
            bad = [t for t in self.given_tokens if t >= rows_total]
            if bad:
                raise ValueError(f"scan: tokens {bad} are out of range: the first layer's input has {rows_total} token rows")
            self._tokens = list(self.given_tokens)
        else:
            self._tokens = evenly_spaced(rows_total, self.max_tokens)
        self._columns = sample_columns(features, self.n_columns)
        self._row_tokens = self._tokens[len(self._tokens) - min(self.n_rows, len(self._tokens)) :]
        self._rows_total = rows_total

    def _summarize(self, layer: int, step: ScanStep, x: torch.Tensor, dtype, shard: Shard) -> None:
        features = x.shape[-1] if x.dim() else 1
        flat = x.detach().reshape(-1, features)
        if self._tokens is None:
            self._choose(flat.shape[0], features)
        if flat.shape[0] != self._rows_total:
            raise ValueError(
                f"scan: {self.prefix}.{layer} {step.value} has {flat.shape[0]} token rows, the first recorded tensor "
                f"{self._rows_total}; a scan records one forward (prefill) of one batch"
            )
        kept = flat[self._tokens]
        columns = [c for c in self._columns if c < features]
        rows = flat[self._row_tokens] if step in _ROW_STEPS else flat[:0]
        self.summaries[(layer, step)] = StepSummary(
            layer=layer,
            step=step,
            rows_total=flat.shape[0],
            features=features,
            dtype=str(dtype).removeprefix("torch."),
            shard=shard,
            checksum=checksum(x),
            nonfinite=int((~torch.isfinite(flat)).sum()) if flat.is_floating_point() else 0,
            token_norms=torch.linalg.vector_norm(kept.float(), dim=1).cpu(),
            columns=kept[:, columns].cpu().clone(),
            rows=rows.cpu().clone(),
        )

    # -- leaving -------------------------------------------------------------------------------------
    def __exit__(self, exc_type, exc, tb) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if exc_type is not None:
            return False
        self.path = write_rank_scan(self.out, self.manifest(), self.rank, self.summaries)
        return False

    def manifest(self) -> ScanManifest:
        missing = [i for i in self.layers if self._calls.get(i, 0) <= self.call]
        if missing:
            raise RuntimeError(
                f"scan: decoder layer(s) {missing} were called fewer than {self.call + 1} time(s) inside the scan; run "
                "the model's forward inside the with block"
            )
        versions = installed_versions()
        config = self.hf_config.to_dict() if self.hf_config is not None else None
        return ScanManifest(
            engine=self.engine,
            engine_version=versions.get(self.engine, self.name_map.version if self.engine == self.name_map.engine else None),
            tp_size=self.tp_size,
            layers=tuple(self.layers),
            tokens=tuple(self._tokens or ()),
            columns=tuple(self._columns or ()),
            row_tokens=tuple(self._row_tokens or ()),
            layer_path=f"{self.prefix}.{{layer}}",
            attention_attr=self.name_map.attention_attr,
            map_key=self.name_map.key,
            model_type=getattr(self.hf_config, "model_type", None),
            hf_config=config,
            call=self.call,
            versions=versions,
            note=self.note,
        )


def _decoder_layers(model: torch.nn.Module) -> tuple[str, dict[int, torch.nn.Module]]:
    """The decoder layers `...layers.<N>` of the module list with the most of them: (prefix, {N: layer})."""
    groups: dict[str, dict[int, torch.nn.Module]] = {}
    for path, module in model.named_modules():
        match = _LAYER.match(path)
        if match:
            groups.setdefault(match.group("prefix"), {})[int(match.group("index"))] = module
    if not groups:
        raise ValueError(f"scan: {type(model).__name__} has no modules at '...layers.<N>' (no decoder layers found)")
    prefix = max(groups, key=lambda p: (len(groups[p]), -len(p)))
    return prefix, groups[prefix]


def _pick_map(layers: dict[int, torch.nn.Module], names) -> NameMap:
    if names is not None:
        return resolve_map(names)
    classes = {c for m in builtin_maps().values() for c in m.attention_classes}
    for layer in layers.values():
        for module in layer.children():
            if type(module).__name__ in classes:
                return map_for_class(type(module).__name__)
    seen = sorted({type(m).__name__ for layer in layers.values() for m in layer.children()})
    raise ValueError(
        f"scan: no decoder layer holds an attention module of a known class {sorted(classes)} (their children: "
        f"{seen}); pass names=<map key or dict> (see mla_debug.capture.user_map)"
    )


def scan(model: torch.nn.Module, out: str | os.PathLike, **options: Any) -> ModelScan:
    """Summarize every decoder layer of `model`'s next forward on this rank into `out` (a context manager;
    see ModelScan)."""
    return ModelScan(model, out, **options)
