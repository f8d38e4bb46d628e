"""Tuned tables (aiter's CSVs, the env var, the embedded shapes), platforms and kernel selection."""

from __future__ import annotations

import csv
import shutil

import pytest
import torch

import mla_debug as md
from mla_debug.kernels import TUNED_ENV_VAR, padded_m_candidates
from mla_debug.kernels.tuned import installed_aiter_configs


def csv_keys(folder) -> set[tuple[str, int, int, int]]:
    """Independent read of the CSVs: every (gfx, cu_num, N, K) with a row."""
    keys = set()
    for path in folder.glob("*a8w8_blockscale_bpreshuffle_tuned_gemm*.csv"):
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                keys.add((row["gfx"], int(row["cu_num"]), int(row["N"]), int(row["K"])))
    return keys


def test_csvs_agree_with_embedded_shapes(aiter_csv_dir):
    # Deduplicated with gfx and cu_num in the key (newer aiter), every shape of the CSVs survives the
    # merge: those are the embedded facts.
    table = md.kernels.TunedTable.from_csv(aiter_csv_dir, dedup_keys=("M", "N", "K", "cu_num", "gfx"))
    assert table.shapes() == csv_keys(aiter_csv_dir)
    assert table.shapes() == md.kernels.TunedTable.embedded().shapes()
    assert table.has_m and not md.kernels.TunedTable.embedded().has_m


def test_the_pinned_aiter_merge_keeps_the_fastest_row_per_m_n_k(aiter_csv_dir):
    """amd-aiter 0.1.7's update_config_files deduplicates on its untuned CSV's columns (M, N, K): where a
    gfx950 row of a shape is faster than every gfx942/80 row of it, the gfx942 shape is gone."""
    table = md.kernels.TunedTable.from_csv(aiter_csv_dir)
    lost = csv_keys(aiter_csv_dir) - table.shapes()
    assert lost == {("gfx942", 80, 2112, 7168), ("gfx942", 80, 2240, 7168), ("gfx942", 80, 4608, 7168)}
    assert table.shapes() <= csv_keys(aiter_csv_dir) and table.conflicts
    for dropped, kept in table.conflicts:
        assert (dropped.m, dropped.n, dropped.k) == (kept.m, kept.n, kept.k)
        assert dropped.us is None or kept.us <= dropped.us
    # one file alone is used as it is (aiter merges only several)
    main = md.kernels.TunedTable.from_csv(aiter_csv_dir / "a8w8_blockscale_bpreshuffle_tuned_gemm.csv")
    assert main.conflicts == [] or all(a.source.split(":")[0] == b.source.split(":")[0] for a, b in main.conflicts)


def test_embedded_shapes_per_card():
    table = md.kernels.TunedTable.embedded()
    assert len(table.shapes("gfx942", 80)) == 21
    assert len(table.shapes("gfx950", 256)) == 79
    assert len(table.shapes("gfx1250", 256)) == 16
    # The key is per card: MI300X and MI325X report 304 CUs and match nothing (aiter issue #4634).
    assert table.shapes("gfx942", 304) == set()
    assert table.has("mi308x", 2112, 7168) and not table.has("mi300x", 2112, 7168)
    assert table.has("mi355x", 3072, 1536) and not table.has("mi355x", 24576, 1536)
    with pytest.raises(ValueError, match="without M"):
        table.has("mi355x", 3072, 1536, m=16)


def test_env_var_and_merge_order(aiter_csv_dir, tmp_path):
    main = aiter_csv_dir / "a8w8_blockscale_bpreshuffle_tuned_gemm.csv"
    override = tmp_path / "mine.csv"
    with open(main, newline="") as handle:
        reader = csv.DictReader(handle)
        first = next(reader)
        fields = reader.fieldnames
    with open(override, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerow({**first, "kernelName": "my_kernel", "us": "1.0"})
        writer.writerow({**first, "N": "48", "K": "1024", "kernelName": "extra"})
    table = md.kernels.TunedTable.from_env({TUNED_ENV_VAR: f"{main}:{override}"})
    m, n, k = int(first["M"]), int(first["N"]), int(first["K"])
    row = table.lookup(md.platform("mi355x"), m, n, k)
    assert row.kernel_name == "my_kernel" and row.source == "mine.csv:2"  # the faster row wins (1 us)
    assert len(table.conflicts) == 1 and table.conflicts[0][1] is row
    assert table.conflicts[0][0].source == "a8w8_blockscale_bpreshuffle_tuned_gemm.csv:2"
    assert table.has("mi355x", 48, 1024) and not md.kernels.TunedTable.embedded().has("mi355x", 48, 1024)
    assert table.origin.origin is md.kernels.TableOrigin.ENV and table.source.startswith(TUNED_ENV_VAR)
    # a later but slower row loses, whatever the file order
    with open(override, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerow({**first, "kernelName": "slow_kernel", "us": "1e6"})
    table = md.kernels.TunedTable.from_csv([main, override])
    assert table.lookup("mi355x", m, n, k).kernel_name == first["kernelName"]
    assert table.conflicts[0][0].kernel_name == "slow_kernel"


def test_env_var_errors_and_fallback(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        md.kernels.TunedTable.from_env({TUNED_ENV_VAR: str(tmp_path / "nope.csv")})
    bad = tmp_path / "bad.csv"
    bad.write_text("gfx,cu_num,M,N\ngfx950,256,1,128\n")
    with pytest.raises(ValueError, match=r"bad.csv: missing columns \['K'\]"):
        md.kernels.TunedTable.from_csv(bad)
    bad.write_text("gfx,cu_num,M,N,K\ngfx950,256,one,128,512\n")
    with pytest.raises(ValueError, match="bad.csv:2: bad row"):
        md.kernels.TunedTable.from_csv(bad)
    if installed_aiter_configs() is None:
        with pytest.raises(LookupError, match=TUNED_ENV_VAR):
            md.kernels.TunedTable.from_env({})
        assert md.kernels.TunedTable.default({}).source.startswith("embedded")


def _fake_installed_aiter(monkeypatch, configs, hip: str | None):
    from mla_debug.kernels import tuned, tuned_source

    found = tuned_source.InstalledAiter(configs, "0.1.7.post2.dev18")
    monkeypatch.setattr(tuned_source, "installed_aiter", lambda: found)
    monkeypatch.setattr(tuned, "installed_aiter", lambda: found)
    monkeypatch.setattr(torch.version, "hip", hip)


def test_default_uses_an_installed_aiter_only_where_it_serves_the_process(aiter_csv_dir, tmp_path, monkeypatch):
    """Installing amd-aiter on a CPU box (the cross-checks do) must not move a verdict: its older tables
    are used by default only on ROCm, and otherwise when asked for."""
    configs = tmp_path / "configs"
    configs.mkdir()
    shutil.copy(aiter_csv_dir / "a8w8_blockscale_bpreshuffle_tuned_gemm.csv", configs)
    _fake_installed_aiter(monkeypatch, configs, hip=None)
    assert md.kernels.TunedTable.default({}).origin == md.kernels.TableSource.embedded()
    assert md.kernels.TunedTable.default({}).source == "embedded shapes of aiter e4048607a535"
    asked = md.kernels.TunedTable.from_installed_aiter()
    assert asked.origin.origin is md.kernels.TableOrigin.INSTALLED_AITER
    assert (
        asked.source == f"installed aiter 0.1.7.post2.dev18: {configs / 'a8w8_blockscale_bpreshuffle_tuned_gemm.csv'}"
    )
    _fake_installed_aiter(monkeypatch, configs, hip="6.4.0")
    assert md.kernels.TunedTable.default({}).source == asked.source
    # the env var wins everywhere
    env = md.kernels.TunedTable.default({TUNED_ENV_VAR: str(configs / "a8w8_blockscale_bpreshuffle_tuned_gemm.csv")})
    assert env.source.startswith(f"{TUNED_ENV_VAR}: ")


def test_table_sources_round_trip_as_data(aiter_csv_dir):
    for table in (md.kernels.TunedTable.embedded(), md.kernels.TunedTable.from_csv(aiter_csv_dir)):
        data = table.origin.to_dict()
        assert md.kernels.TableSource.from_dict(data) == table.origin
        assert data["origin"] in ("embedded", "files") and table.source == table.origin.describe()
    assert md.kernels.TunedTable([], source="rows made in code").origin is None


def test_directory_layout_like_aiter(aiter_csv_dir, tmp_path):
    """configs/<main>.csv plus configs/model_configs/*.csv, untuned files ignored."""
    configs = tmp_path / "configs"
    (configs / "model_configs").mkdir(parents=True)
    shutil.copy(aiter_csv_dir / "a8w8_blockscale_bpreshuffle_tuned_gemm.csv", configs)
    shutil.copy(aiter_csv_dir / "a8w8_blockscale_bpreshuffle_tuned_gemm_dsv3.csv", configs / "model_configs")
    (configs / "model_configs" / "a8w8_blockscale_bpreshuffle_untuned_gemm_x.csv").write_text("junk")
    table = md.kernels.TunedTable.from_csv(configs)
    assert [p.relative_to(configs).as_posix() for p in table.files] == [
        "a8w8_blockscale_bpreshuffle_tuned_gemm.csv",
        "model_configs/a8w8_blockscale_bpreshuffle_tuned_gemm_dsv3.csv",
    ]
    assert table.source == f"2 CSV files under {configs}"


@pytest.mark.parametrize(
    "m,n,expected",
    [
        (1, 7168, [1, 16]),
        (17, 7168, [17, 32]),
        (200, 7168, [200, 208, 256]),
        (300, 7168, [300, 320, 512]),
        (1025, 7168, [1025, 1088, 2048]),
        (5000, 7168, [5000, 5120, 8192]),
        (4096, 7168, [4096]),
        # getPaddedM(gl=1) caps M at 8192 when M > 8192 and N > 4096, else the next power of two
        (9000, 7168, [9000, 9088, 8192]),
        (9000, 4096, [9000, 9088, 16384]),
        (8192, 7168, [8192]),
        (16385, 4097, [16385, 16512, 8192]),
    ],
)
def test_m_padding_order(m, n, expected):
    assert padded_m_candidates(m, n) == expected


def test_lookup_uses_padded_m(aiter_csv_dir):
    table = md.kernels.TunedTable.from_csv(aiter_csv_dir)
    ms = {r.m for r in table.rows() if r.gfx == "gfx950" and r.n == 3072 and r.k == 1536}
    assert {16, 32, 4096, 8192} <= ms and not {17, 5000, 5120} & ms
    assert table.lookup("mi355x", 16, 3072, 1536).m == 16
    assert table.lookup("mi355x", 17, 3072, 1536).m == 32  # padded to 16s up to 256
    assert table.lookup("mi355x", 5000, 3072, 1536).m == 8192  # no 5120 row: next power of two
    assert table.has("mi355x", 3072, 1536, m=17)
    assert table.lookup("mi300x", 16, 3072, 1536) is None


def test_platform_presets_and_errors():
    assert md.platform("MI355X").arch == "gfx950" and md.platform("mi355x").fp8 is md.E4M3FN
    assert md.platform("mi300x").fp8 is md.E4M3FNUZ and md.platform("mi308x").cu_num == 80
    assert md.platform("h200").is_cuda and md.platform("cpu").vendor == "cpu"
    legacy = md.platform("mi300x").with_fp8("e4m3fn")
    assert legacy.fp8 is md.E4M3FN and legacy.cu_num == 304
    with pytest.raises(ValueError, match="valid: cpu, xeon-amx, mi300x, mi308x, mi325x, mi355x, gfx1250, h200, b200"):
        md.platform("mi250")


def test_policy_picks_preshuffled_only_for_tuned_shapes():
    policy = md.KernelPolicy.for_platform("mi355x", tuned=md.kernels.TunedTable.embedded(), native=False)
    kernel, reason = policy.select("q_b_proj", 3072, 1536, "mi355x")
    assert kernel.name == "aiter-bpreshuffle" and "tuned row" in reason and "gfx950/cu256" in reason
    kernel, reason = policy.select("q_b_proj", 24576, 1536, "mi355x")
    assert kernel.name == "aiter-blockscale"
    assert "skipped aiter-bpreshuffle (no bpreshuffle tuned row for (N=24576, K=1536) on gfx950/cu256)" in reason
    kernel, _ = policy.select("fused_qkv_a_proj", 2112, 7168, "mi300x", fmt=md.E4M3FNUZ)
    assert kernel.name == "aiter-blockscale"  # 304 CUs: the table never matches
    kernel, _ = policy.select("fused_qkv_a_proj", 2112, 7168, "mi308x", fmt=md.E4M3FNUZ)
    assert kernel.name == "aiter-bpreshuffle"


def test_policy_before_pr51692_and_disabled_and_overrides():
    tuned = md.kernels.TunedTable.embedded()
    before = md.KernelPolicy.for_platform("mi355x", preshuffled_first=False, tuned=tuned, native=False)
    assert before.select("q_b_proj", 3072, 1536, "mi355x")[0].name == "aiter-blockscale"
    disabled = md.KernelPolicy.for_platform(
        "mi355x", tuned=tuned, native=False, disabled="AiterPreshuffledFp8BlockScaledMMKernel"
    )
    kernel, reason = disabled.select("q_b_proj", 3072, 1536, "mi355x")
    assert kernel.name == "aiter-blockscale" and "aiter-bpreshuffle disabled" in reason
    overridden = md.KernelPolicy(
        ["aiter-bpreshuffle", "aiter-blockscale"], tuned=tuned, overrides={"kv_b_proj": "torch-reference"}
    )
    kernel, reason = overridden.select("kv_b_proj", 4096, 512, "mi355x")
    assert kernel.name == "torch-reference" and "override" in reason
    options = md.KernelPolicy(
        ["aiter-bpreshuffle"], tuned=tuned, kernel_options={"aiter-bpreshuffle": {"honour_layer_flags": False}}
    )
    assert options.select("q_b_proj", 3072, 1536, "mi355x")[0].honour_layer_flags is False


def test_policy_errors():
    with pytest.raises(ValueError, match="registered kernels"):
        md.KernelPolicy(["no-such-kernel"])
    policy = md.KernelPolicy(["aiter-bpreshuffle"], tuned=md.kernels.TunedTable.embedded())
    with pytest.raises(ValueError, match=r"o_proj \(N=7000, K=16384\) on mi355x: no kernel .*not a multiple of 16"):
        policy.select("o_proj", 7000, 16384, "mi355x")
    with pytest.raises(ValueError, match="aiter kernels run on ROCm platforms, not h200"):
        policy.select("o_proj", 7168, 16384, "h200")


def test_nvidia_policy_mirrors_the_rocm_choice_with_triton_stand_ins():
    policy = md.KernelPolicy.for_platform("h200", tuned=md.kernels.TunedTable.embedded())
    kernel, reason = policy.select("o_proj", 7168, 16384, "h200")
    assert kernel.name == "triton-bpreshuffle" and "selection as on mi355x" in reason
    kernel, reason = policy.select("q_b_proj", 24576, 1536, "h200")  # no gfx950 row for this shape
    assert kernel.name == "triton-blockscale" and "no bpreshuffle tuned row for (N=24576, K=1536)" in reason
    before = md.KernelPolicy.for_platform("h200", preshuffled_first=False, tuned=md.kernels.TunedTable.embedded())
    assert before.select("o_proj", 7168, 16384, "h200")[0].name == "triton-blockscale"


def test_cublas_scenario_on_a_cpu_machine_falls_back_with_the_reason():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the CPU-only fallback")
    kernel, reason = md.scenario("nvidia-cublas").policy("h200").select("o_proj", 7168, 16384, "h200")
    assert kernel.name == "torch-reference" and "cublas-blockwise (needs an NVIDIA CUDA GPU" in reason


def test_load_records_events():
    import torch

    weight = md.layouts.quantize_blocks(torch.randn(3072, 1536) * 0.02)
    policy = md.KernelPolicy.for_platform("mi355x", tuned=md.kernels.TunedTable.embedded(), native=False)
    lin = md.kernels.BlockScaledLinear("q_b_proj", weight).load(policy, "mi355x")
    assert lin.kernel.name == "aiter-bpreshuffle"
    assert lin.events[0].startswith("kernel aiter-bpreshuffle:")
    assert "shuffled (16, 16) by aiter-bpreshuffle" in lin.events[1]
    assert "aiter-bpreshuffle" in repr(lin)
