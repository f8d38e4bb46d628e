"""The one step loop: hooks see every step, replacements propagate or fail clearly, and patching from a
reference run shards its gathered outputs back per rank exactly."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mla_debug as md
from mla_debug.model.program import StepNotReplaceable
from mla_debug.model.records import CONCAT, PARTIAL, REPLICATED, StepRecord
from mla_debug.parallel.gather import gather_step
from mla_debug.parallel.patch import ShardedReplacement

V3_DECODE = ["fused_qkv_a", "q_a_layernorm", "kv_a_layernorm", "q_b_proj", "rope", "absorb_uk", "attention"]
V3_DECODE += ["absorb_uv", "o_proj", "all_reduce"]


@pytest.fixture(scope="module")
def tiny():
    cfg = md.MLAConfig.preset("tiny")
    gen = torch.Generator().manual_seed(3)
    return cfg, md.Checkpoint.synthetic(cfg, seed=0), torch.randn(8, cfg.hidden_size, generator=gen), torch.arange(8)


@pytest.fixture(scope="module")
def layer(tiny):
    cfg, ckpt, _, _ = tiny
    return md.MLALayer(cfg, ckpt, tp_size=2, platform="mi355x", scenario="vllm-pr51692")


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes: equality of these is bitwise equality (signed zeros and NaN payloads too)."""
    return t.contiguous().view(-1).view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


class Recorder:
    """A hook that notes (step, rank) and checks the step's declared state slot holds its output."""

    def __init__(self, layer, mode: str) -> None:
        self.seen: list[tuple[str, int]] = []
        self.slots: dict[tuple[str, int], bool] = {}
        self.layer, self.mode = layer, mode

    def __call__(self, record: StepRecord, state: dict):
        self.seen.append((record.name, record.rank))
        step = next(s for s in self.layer.ranks[record.rank].steps(self.mode) if s.name == record.name)
        if step.state_key is not None:
            held = state[step.state_key]
            self.slots[(record.name, record.rank)] = same_bits(held.reshape(record.output.shape), record.output)
        return None


@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize(
    "model,scenario", [("tiny", "vllm-pr51692"), ("tiny-v4", "reference"), ("tiny-v4", "vllm-pr56433")]
)
def test_hooks_see_every_step_in_order_and_each_slot_holds_its_output(model, scenario, mode):
    cfg = md.MLAConfig.preset(model)
    layer = md.MLALayer(cfg, md.Checkpoint.synthetic(cfg, seed=0), tp_size=2, platform="mi355x", scenario=scenario)
    hidden = torch.randn(4, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    recorder = Recorder(layer, mode)
    names = [step.name for step in layer.ranks[0].steps(mode)]
    run = layer.run(hidden, torch.arange(4), mode, hooks={name: recorder for name in names})
    assert run.step_names == names
    assert recorder.seen == [(name, rank) for name in names for rank in (0, 1)]
    # The contract replace_output rests on: every declared slot holds exactly the recorded output.
    assert recorder.slots and all(recorder.slots.values()), [k for k, ok in recorder.slots.items() if not ok]
    assert not any(record.replaced for record in run.records.values())


def test_a_replacement_reaches_every_later_step_and_no_earlier_one(layer, tiny):
    _, _, hidden, positions = tiny
    plain = layer.run(hidden, positions, "decode")
    same = layer.run(hidden, positions, "decode", hooks={"q_b_proj": lambda record, state: record.output.clone()})
    for name in V3_DECODE:  # replacing a step's output with its own values changes nothing
        assert same_bits(same.records[name].output, plain.records[name].output), name
    assert same.records["q_b_proj"].replaced and not same.records["rope"].replaced

    doubled = layer.run(hidden, positions, "decode", hooks={"q_b_proj": lambda record, state: record.output * 2})
    before, after = V3_DECODE[: V3_DECODE.index("q_b_proj")], V3_DECODE[V3_DECODE.index("rope") :]
    for name in before:
        assert same_bits(doubled.records[name].output, plain.records[name].output), name
    assert torch.equal(doubled.records["q_b_proj"].output, plain.records["q_b_proj"].output * 2)
    for name in after:  # q feeds rope, absorb_uk, attention, ..., the output
        assert not torch.equal(doubled.records[name].output, plain.records[name].output), name
    assert doubled.records["q_b_proj"].stats.amax == 2 * plain.records["q_b_proj"].stats.amax
    assert "output replaced by a hook" in doubled.records["q_b_proj"].summary()


def test_several_hooks_run_in_order_each_seeing_the_last_replacement(layer, tiny):
    _, _, hidden, positions = tiny
    seen = []

    def add_one(record, state):
        seen.append(record.output.clone())
        return record.output + 1

    run = layer.run(hidden, positions, "prefill", hooks={"o_proj": [add_one, add_one]})
    plain = layer.run(hidden, positions, "prefill")
    assert len(seen) == 4 and torch.equal(seen[1], seen[0] + 1)  # rank 0 twice, then rank 1 twice
    # Each rank's partial grew by 2, so the all-reduce of two ranks grew by about 4.
    diff = (run.output.float() - plain.output.float()).mean().item()
    assert diff == pytest.approx(4.0, abs=0.1)


def test_bad_replacements_name_the_step_and_both_shapes(layer, tiny):
    _, _, hidden, positions = tiny
    with pytest.raises(
        ValueError,
        match=r"step q_b_proj on rank 0: a replacement must have the step's output shape "
        r"\(8, 1536\) and dtype torch.bfloat16, got shape \(8, 3\) and dtype torch.bfloat16",
    ):
        layer.run(hidden, positions, hooks={"q_b_proj": lambda r, s: torch.zeros(8, 3, dtype=torch.bfloat16)})
    with pytest.raises(
        ValueError,
        match=r"step rope on rank 0: .* dtype torch.bfloat16, got shape \(8, 8, 192\) and dtype torch.float32",
    ):
        layer.run(hidden, positions, hooks={"rope": lambda r, s: r.output.float()})
    with pytest.raises(TypeError, match="step attention on rank 0: a hook returned list"):
        layer.run(hidden, positions, hooks={"attention": lambda r, s: [1.0]})
    with pytest.raises(ValueError, match=r"hooks for \['absorb_uk'\], which the prefill forward of tiny does not run"):
        layer.run(hidden, positions, "prefill", hooks={"absorb_uk": lambda r, s: None})
    with pytest.raises(TypeError, match=r"hooks\['rope'\]: 3 is not callable"):
        layer.run(hidden, positions, hooks={"rope": [3]})
    with pytest.raises(TypeError, match="hooks must map step names"):
        layer.run(hidden, positions, hooks=[("rope", print)])


def test_the_fused_v4_producer_cannot_be_replaced():
    cfg = md.MLAConfig.preset("tiny-v4")
    layer = md.MLALayer(cfg, md.Checkpoint.synthetic(cfg, seed=0), platform="mi355x", scenario="vllm-pr51692")
    hidden = torch.randn(4, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    with pytest.raises(StepNotReplaceable, match="step q_norm on rank 0: .*read its FP8 data and scales"):
        layer.run(hidden, torch.arange(4), hooks={"q_norm": lambda r, s: r.output})
    # Observing it is fine; so is replacing indexer_q, whose output no later step reads.
    run = layer.run(
        hidden, torch.arange(4), hooks={"q_norm": lambda r, s: None, "indexer_q": lambda r, s: r.output * 0}
    )
    assert run.records["indexer_q"].output.abs().max() == 0 and not run.records["q_norm"].replaced


def test_patching_a_run_with_its_own_outputs_changes_nothing(layer, tiny):
    _, _, hidden, positions = tiny
    plain = layer.run(hidden, positions, "decode")
    patched = layer.run(hidden, positions, "decode", patch=md.Patch(plain, V3_DECODE))
    for name in V3_DECODE:
        assert same_bits(patched.records[name].output, plain.records[name].output), name
        assert patched.records[name].replaced
        if plain.records[name].gather == PARTIAL:
            continue  # rank 0 holds the whole sum and rank 1 zeros: other shares, the same total
        for a, b in zip(patched.per_rank[name], plain.per_rank[name]):
            assert same_bits(a.output, b.output), (name, a.rank)


def test_a_tp1_reference_patched_into_tp2_lands_on_each_rank(tiny):
    cfg, ckpt, hidden, positions = tiny
    tp1 = md.run_layer(cfg, ckpt, hidden, positions, tp_size=1, mode="decode")
    steps = ["fused_qkv_a", "q_b_proj", "o_proj"]  # replicated, column-parallel, partial sums
    tp2 = md.run_layer(cfg, ckpt, hidden, positions, tp_size=2, mode="decode", patch=md.Patch(tp1, steps))
    for name in steps:
        assert same_bits(tp2.records[name].output, tp1.records[name].output), name
    share = tp1.records["q_b_proj"].output.shape[1] // 2
    for rank, record in enumerate(tp2.per_rank["q_b_proj"]):
        assert same_bits(
            record.output, tp1.records["q_b_proj"].output[:, rank * share : (rank + 1) * share].contiguous()
        )
    rank1 = tp2.per_rank["o_proj"][1].output
    assert (rank1 == 0).all() and torch.signbit(rank1).all()
    # The rank-order sum of (whole value, zeros) is the TP1 layer output bit for bit.
    assert same_bits(tp2.output, tp1.output)


def test_a_patch_from_another_input_is_refused_with_both_shapes(layer, tiny):
    cfg, ckpt, hidden, positions = tiny
    other = md.run_layer(cfg, ckpt, hidden[:4], positions[:4], tp_size=1)
    with pytest.raises(
        ValueError,
        match=r"patch of step q_b_proj: the reference output has shape \(4, 3072\), but a "
        r"TP2 run's gathered output is \(8, 3072\)",
    ):
        layer.run(hidden, positions, patch=md.Patch(other, "q_b_proj"))
    with pytest.raises(ValueError, match=r"Patch: the reference run .* has no step \['absorb_uk'\]"):
        md.Patch(other, ["absorb_uk"])
    with pytest.raises(ValueError, match="steps is empty"):
        md.Patch(other, [])
    with pytest.raises(TypeError, match="from_run must be a LayerRun"):
        md.Patch(other.records, ["rope"])
    with pytest.raises(TypeError, match="patch must be an mla_debug Patch"):
        layer.run(hidden, positions, patch={"rope": other})


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_distributed_and_in_process_patched_runs_are_bitwise_identical(tiny, mode):
    cfg, ckpt, hidden, positions = tiny
    reference = md.run_layer(cfg, ckpt, hidden, positions, tp_size=1, mode=mode)
    kwargs = dict(tp_size=2, mode=mode, platform="mi355x", scenario="vllm-pr51692")
    kwargs["patch"] = md.Patch(reference, ["q_b_proj", "attention", "o_proj"])
    simulated = md.run_layer(cfg, ckpt, hidden, positions, **kwargs)
    distributed = md.run_layer(cfg, ckpt, hidden, positions, executor="distributed", **kwargs)
    assert simulated.step_names == distributed.step_names
    for name in simulated.step_names:
        assert same_bits(simulated.records[name].output, distributed.records[name].output), name
        assert simulated.records[name].replaced == distributed.records[name].replaced
    assert same_bits(distributed.records["attention"].output, reference.records["attention"].output)


def test_distributed_hooks_must_be_picklable(tiny):
    with pytest.raises(TypeError, match=r"hooks\['rope'\]: .* cannot be sent to the rank processes"):
        md.run_layer(*tiny, tp_size=2, executor="distributed", hooks={"rope": lambda r, s: None})


@st.composite
def gathered_case(draw):
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    gather = draw(st.sampled_from([CONCAT, PARTIAL, REPLICATED]))
    shape = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(2, 3)))]
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    if gather == CONCAT:
        shape[dim] *= tp
    dtype = draw(st.sampled_from([torch.bfloat16, torch.float32]))
    seed = draw(st.integers(0, 2**16))
    full = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    full[full.abs() < 0.3] = -0.0  # signed zeros must survive the round trip too
    return tp, gather, dim, full


@settings(max_examples=60, deadline=None)
@given(gathered_case())
def test_sharding_a_gathered_output_back_is_the_inverse_of_gathering(case):
    tp, gather, dim, full = case
    local = list(full.shape)
    if gather == CONCAT:
        local[dim] //= tp
    hook = ShardedReplacement("step", full, tp)
    records = []
    for rank in range(tp):
        record = StepRecord("step", torch.empty(local, dtype=full.dtype), rank=rank, gather=gather, gather_dim=dim)
        record.output = hook(record, {})
        records.append(record)
    assert same_bits(gather_step(records).output, full)
