"""bench/harness.py without a GPU: options, the workload table (each workload's FlexAttention mask_mod equals
maskc's exact mask of examples/NAME.mask), the flop conventions, and the formatting of tables (forward and
--backward), JSON and the plot."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from maskc.compiler import compile_file
from maskc.kernels import KernelOptions
from maskc.tools.reference import dense_mask

ROOT = Path(__file__).resolve().parents[1]


def _load_harness():
    spec = importlib.util.spec_from_file_location("bench_harness", ROOT / "bench" / "harness.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


harness = _load_harness()


# -- options ---------------------------------------------------------------------------------------------

def test_defaults():
    args = harness.parse_args([])
    assert args.workloads == list(harness.WORKLOADS) and args.systems == list(harness.SYSTEMS)
    assert (args.family, args.head_dim, args.dtype, args.heads, args.n, args.rows) == ("auto", 128, "bf16", 16, 32768, 256)
    assert not args.sweep and not args.first_call and not args.backward and args.json is None and args.png is None
    assert harness.family_options(args.family) == {}  # auto: maskc chooses


def test_options():
    args = harness.parse_args(["--family", "sm90a", "--head-dim", "64", "--dtype", "fp16", "--heads", "4",
                               "--n", "4096", "--workloads", "causal", "document", "--systems", "maskc", "flex-triton",
                               "--sweep", "--first-call", "--json", "r.json", "--png", "r.png", "--rows", "64",
                               "--backward"])
    assert (args.head_dim, args.dtype, args.heads, args.n, args.rows) == (64, "fp16", 4, 4096, 64)
    assert args.workloads == ["causal", "document"] and args.systems == ["maskc", "flex-triton"]
    assert args.sweep and args.first_call and args.backward and (args.json, args.png) == ("r.json", "r.png")
    assert harness.family_options("sm90a") == {"arch": "sm_90a"}
    assert harness.family_options("sm80") == {"arch": "sm_80"}
    assert harness.parse_args(["--workloads", "--sweep"]).workloads == []  # no anchor table
    more = harness.parse_args(["--workloads", "causal", "tree", "more"]).workloads
    assert more == ["causal", "tree"] + [w for w in harness.MORE_WORKLOADS if w != "tree"]


@pytest.mark.parametrize("argv", [["--family", "sm100"], ["--head-dim", "96"], ["--dtype", "fp32"],
                                  ["--workloads", "nope"], ["--systems", "xformers"], ["--n", "0"]])
def test_bad_options(argv):
    with pytest.raises(SystemExit):
        harness.parse_args(argv)


# -- workloads -------------------------------------------------------------------------------------------

def test_every_workload_has_a_mask_file():
    for name in harness.ALL_WORKLOADS:
        assert (harness.EXAMPLES / f"{name}.mask").is_file(), name


def _bound(w):
    compiled = compile_file(harness.EXAMPLES / f"{w.name}.mask", KernelOptions(), w.consts)
    return compiled, *compiled.bind(w.sequences)


@pytest.mark.parametrize("name", harness.ALL_WORKLOADS)
def test_anchor_size_is_the_mask_files_defaults(name):
    """At N = 32768 the harness's geometry is exactly the example's defaults (ANCHORS.md's workload)."""
    w = harness.make_workload(name)
    assert w.n == sum(w.lengths) == 32768
    compiled, values, layouts = _bound(w)
    defaults = [dict(line) for line in compiled.program.batch] if compiled.program.batch else [{}]
    want_values, want_layouts = compiled.bind(defaults)
    assert [lay.n for lay in layouts] == [lay.n for lay in want_layouts]
    for got, want in zip(values, want_values):
        assert got.key()[1:] == want.key()[1:]  # scalars and lists (n: the layouts above)
    assert compile_file(harness.EXAMPLES / f"{name}.mask", KernelOptions()).program.consts == compiled.program.consts


def _maskc_dense(w):
    """maskc's exact mask of the whole packed batch: each sequence's dense mask on the diagonal."""
    compiled, values, layouts = _bound(w)
    out = np.zeros((w.n, w.n), dtype=bool)
    at = 0
    for val, lay in zip(values, layouts):
        out[at:at + lay.n, at:at + lay.n] = dense_mask(compiled.program, lay, val)
        at += lay.n
    assert at == w.n
    return out


def _mod_dense(w, array=np.asarray, arange=np.arange):
    mod = harness.mask_mod(w, array)
    q, k = arange(w.n)[:, None], arange(w.n)[None, :]
    return np.broadcast_to(np.asarray(mod(0, 0, q, k)), (w.n, w.n))


@pytest.mark.parametrize("n", [2048, 1280, 4096])
@pytest.mark.parametrize("name", harness.ALL_WORKLOADS)
def test_mask_mod_is_maskcs_mask(name, n):
    """The FlexAttention mask_mod (numpy arrays here) and maskc's reference agree on every pair."""
    if name == "video3d" and n % 4096:
        pytest.skip("video3d's frames are 64 x 64 tokens")
    w = harness.make_workload(name, n)
    want = _maskc_dense(w)
    got = _mod_dense(w)
    assert got.shape == want.shape
    if not np.array_equal(got, want):
        q, k = np.argwhere(got != want)[0]
        raise AssertionError(f"{name} n={n}: mask_mod says {got[q, k]}, maskc says {want[q, k]} at (q={q}, k={k})")
    assert 0 < want.mean() <= 1


@pytest.mark.parametrize("name", harness.ALL_WORKLOADS)
def test_mask_mod_with_torch_cpu_tensors(name):
    torch = pytest.importorskip("torch")
    w = harness.make_workload(name, 4096 if name == "video3d" else 1024)
    got = _mod_dense(w, lambda a: torch.as_tensor(a), lambda n: torch.arange(n))
    assert np.array_equal(np.asarray(got), _mod_dense(w))


def test_scale_lengths():
    assert harness.scale_lengths(harness.DOCS, 32768) == harness.DOCS
    for total in (12, 100, 1024, 5000, 65536):
        got = harness.scale_lengths(harness.DOCS, total)
        assert sum(got) == total and min(got) >= 1 and len(got) == len(harness.DOCS)
    with pytest.raises(ValueError):
        harness.scale_lengths(harness.DOCS, 5)


def test_grid_workloads_need_whole_rows():
    with pytest.raises(ValueError, match="multiple of 256"):
        harness.make_workload("clear", 1000)
    with pytest.raises(ValueError, match="unknown workload"):
        harness.make_workload("nope")


def test_native_forms():
    assert harness.native_form(harness.make_workload("full")) == ("full", None)
    assert harness.native_form(harness.make_workload("causal", 1024)) == ("causal", None)
    assert harness.native_form(harness.make_workload("sliding_window")) == ("window", 4096)
    assert harness.native_form(harness.make_workload("sliding_window", 8192)) == ("window", 1024)
    for name in ("document", "shared_prompt", "rm_shared", "hstu", "hstu_jagged", "clear", "clear_text"):
        assert harness.native_form(harness.make_workload(name)) is None


# -- numbers and formatting ------------------------------------------------------------------------------

def _row(label="causal"):
    return {"workload": label, "n": 32768, "label": label, "visible": 0.5000153, "blockmask_ms": 9.04,
            "systems": {
                "maskc": {"status": "ok", "tflops": 300.0, "ms": 14.66, "plan_ms": 2.9, "max_err": 1e-3, "bound": 7e-3},
                "flex-triton": {"status": "ok", "tflops": 400.0, "ms": 11.0},
                "sdpa-flash": {"status": "ok", "tflops": 600.0, "ms": 7.33},
                "sdpa-cudnn": {"status": "FAILED", "max_err": 0.5, "bound": 7e-3, "nan": True},
                "fa4": {"status": "skipped", "note": "flash_attn.cute is not importable"},
                "flex-fa4": {"status": "error", "error": "RuntimeError: BACKEND='FLASH' but ..."}}}


def test_tflops_and_ratios():
    # causal at 32768, 16 heads, head dim 128: 4 * pairs * 128 * 16 flops in 14.66 ms
    pairs = 32768 * 32769 // 2
    assert harness.tflops(pairs, 16, 128, 14.66) == pytest.approx(4 * pairs * 128 * 16 / 14.66e-3 / 1e12)
    assert harness.ratios(_row()["systems"]) == (pytest.approx(0.75), pytest.approx(0.5))
    assert harness.ratios({"maskc": {"status": "error"}}) == (None, None)
    assert harness.ratios({"maskc": {"status": "ok", "tflops": 1.0}}) == (None, None)


def test_table():
    wrong = {"status": "FAILED", "max_err": 1e-3, "bound": 7e-3, "nan": False, "visible_pairs_lse": 99,
             "lse_count_agrees": False}
    rows = [_row(), {"label": "clear", "visible": None, "error": "no inputs",
                     "systems": {s: {"status": "n/a"} for s in harness.SYSTEMS}},
            {"label": "document", "visible": 0.06, "visible_pairs": 100, "systems": {"maskc": wrong}}]
    text = harness.format_table(rows, list(harness.SYSTEMS), "title")
    lines = text.splitlines()
    assert lines[0] == "title"
    causal = next(line for line in lines if line.startswith("causal"))
    assert causal.split() == ["causal", "50.00", "300.0", "400.0", "600.0", "FAIL", "skip", "err", "0.75", "0.50",
                              "2.90", "9.04"]
    times = [line for line in lines if line.startswith("causal")][1]
    assert times.split() == ["causal", "14.660", "11.000", "7.330", "FAIL", "skip", "err"]
    assert max(len(line) for line in lines[:-1]) < 120  # compact: the GPU tool returns only the tail
    problems = harness.format_problems(rows)
    assert "causal/sdpa-cudnn: FAILED" in problems and "NaN" in problems and "causal/flex-fa4: RuntimeError" in problems
    assert "clear: no inputs" in problems
    assert "document/maskc: FAILED" in problems and "exp(LSE) 99, by the mask 100" in problems
    assert next(line for line in lines if line.startswith("document")).split()[:3] == ["document", "6.00", "FAIL"]


def test_training_flops():
    """The backward counts as 2.5 forward passes, forward + backward as 3.5 (F = the forward's flops)."""
    pairs = 32768 * 32769 // 2
    got = harness.training_tflops(pairs, 16, 128, bwd_ms=30.0, step_ms=40.0)
    forward = 4 * pairs * 128 * 16
    assert got == {"bwd_ms": 30.0, "bwd_tflops": pytest.approx(2.5 * forward / 30e-3 / 1e12),
                   "step_ms": 40.0, "step_tflops": pytest.approx(3.5 * forward / 40e-3 / 1e12)}
    assert got["bwd_tflops"] == pytest.approx(2.5 * harness.tflops(pairs, 16, 128, 30.0))
    same = harness.training_tflops(pairs, 16, 128, bwd_ms=10.0, step_ms=10.0)
    assert same["step_tflops"] / same["bwd_tflops"] == pytest.approx(3.5 / 2.5)


def _backward_row(label="causal"):
    """A --backward row: forward numbers as _row, and each system's backward outcome beside its status."""
    row = _row(label)
    s = row["systems"]
    s["maskc"].update(bwd_status="ok", dq_err=2e-3, dq_bound=9e-3, dq_nan=False, bwd_ms=20.0, bwd_tflops=500.0,
                      step_ms=30.0, step_tflops=450.0)
    s["flex-triton"].update(bwd_status="ok", dq_err=3e-3, dq_bound=9e-3, dq_nan=False, bwd_ms=40.0, bwd_tflops=250.0,
                            step_ms=45.0, step_tflops=300.0)
    s["sdpa-flash"].update(bwd_status="FAILED", dq_err=0.5, dq_bound=9e-3, dq_nan=True)  # its forward passed
    s["fa4"] = {"status": "n/a", "note": "backward mode: not measured"}
    return row


def test_backward_tables():
    rows = [_backward_row(), _backward_row("document")]
    rows[1]["systems"]["maskc"] = {"status": "ok", "tflops": 100.0, "ms": 3.0, "bwd_status": "error",
                                   "bwd_error": "RuntimeError: boom"}
    systems = list(harness.SYSTEMS)
    step = harness.format_table(harness.backward_rows(rows, "step"), systems, "fwd+bwd").splitlines()
    causal = [line.split() for line in step if line.startswith("causal")]
    # step TFLOP/s, the ratios on them (maskc / flex-triton, the only other passing system), no plan or BM
    assert causal[0] == ["causal", "50.00", "450.0", "300.0", "FAIL", "FAIL", "n/a", "err", "1.50", "1.50", "-", "-"]
    assert causal[1] == ["causal", "30.000", "45.000", "FAIL", "FAIL", "n/a", "err"]
    document = next(line for line in step if line.startswith("document")).split()
    assert document[:4] == ["document", "50.00", "err", "300.0"] and document[-4:-2] == ["-", "-"]
    bwd = harness.format_table(harness.backward_rows(rows, "bwd"), systems, "backward alone").splitlines()
    causal = [line.split() for line in bwd if line.startswith("causal")]
    assert causal[0][2:4] == ["500.0", "250.0"] and causal[0][8:10] == ["2.00", "2.00"]
    assert causal[1][1:3] == ["20.000", "40.000"]
    assert rows[0]["systems"]["maskc"]["tflops"] == 300.0  # the forward numbers are left as they were
    forward = harness.format_table(rows, systems, "forward").splitlines()
    assert next(line for line in forward if line.startswith("causal")).split()[2:5] == ["300.0", "400.0", "600.0"]


def test_backward_problems_and_progress():
    rows = [_backward_row()]
    rows[0]["systems"]["maskc"].update(bwd_status="error", bwd_error="RuntimeError: boom")
    problems = harness.format_problems(rows)
    assert "causal/sdpa-flash: backward FAILED max|dQ-dQ_ref| 5.000e-01, bound 9.000e-03 (NaN in dQ)" in problems
    assert "causal/maskc: backward: RuntimeError: boom" in problems
    assert "causal/flex-triton: backward" not in problems
    line = harness.format_progress("causal", "flex-triton", _backward_row()["systems"]["flex-triton"])
    assert "400.0 TFLOP/s" in line and "| backward ok fwd+bwd 300.0 TFLOP/s 45.000 ms, bwd 250.0 TFLOP/s" in line
    assert "dQ err 3.00e-03 <= 9.00e-03" in line
    assert "backward" not in harness.format_progress("causal", "flex-triton", _row()["systems"]["flex-triton"])


def _results(rows):
    return {"meta": {"gpu": "test"}, "notes": [], "anchors": rows, "sweep": [], "first_call": None}


def test_summary_with_and_without_backward(capsys):
    harness.print_summary(_results([_row()]), harness.parse_args([]))
    out = capsys.readouterr().out
    assert "ANCHORS workloads, N = 32768: forward, bf16, 16 heads, head dim 128, maskc family auto" in out
    assert "fwd+bwd" not in out and "backward alone" not in out
    harness.print_summary(_results([_backward_row()]), harness.parse_args(["--backward"]))
    out = capsys.readouterr().out
    titles = [line for line in out.splitlines() if line.startswith("ANCHORS")]
    setting = "bf16, 16 heads, head dim 128, maskc family auto"
    assert titles == [f"ANCHORS workloads, N = 32768: {what}, {setting}"
                      for what in ("forward", "fwd+bwd (backward counted as 2.5 x forward)", "backward alone")]
    assert "causal/sdpa-flash: backward FAILED" in out


def test_settings_record_the_backward_conventions():
    s = harness.settings(harness.parse_args(["--backward"]))
    assert s["backward"] is True and "2.5 F / bwd_ms" in s["backward_flops"] and "3.5 F / step_ms" in s["backward_flops"]
    assert "1e-4" in s["dq_pass_rule"]
    assert harness.settings(harness.parse_args([]))["backward"] is False


def test_first_call_table():
    fc = {"n": 4096, "heads": 16,
          "maskc_cold": {"render_ms": 20.0, "nvrtc_ms": 900.0, "plan_ms": 1.0, "load_launch_ms": 30.0, "total_ms": 951.0,
                         "second_ms": 0.2},
          "maskc_warm_cache": {"render_ms": 20.0, "nvrtc_ms": 0.3, "plan_ms": 1.0, "load_launch_ms": 30.0,
                               "total_ms": 51.3, "second_ms": 0.2, "import_ms": 3000.0, "cuda_init_ms": 400.0,
                               "new_cache_files": 0, "cache_hit": True},
          "flex_triton": {"blockmask_ms": 3.0, "compile_first_ms": 2000.0, "total_ms": 2003.0, "second_ms": 0.3},
          "overhead": {"n": 1024, "calls": 200,
                       "systems": {"maskc": {"loop_us": 90.0, "host_us": 85.0, "gpu_ms": 0.03},
                                   "flex-triton": {"error": "boom"}},
                       "maskc_tiny": {"n": 128, "loop_us": 80.0}}}
    text = harness.format_first_call(fc)
    assert "cache hit" in text and "NO cache hit" not in text and "900.0" in text and "boom" in text
    assert "80.0 us per call" in text and "compile+1st 2000.0" in text
    assert harness.format_first_call({"n": 4096, "heads": 16, "maskc_cold": {"error": "NVRTC"}}).count("error") == 1


def test_json_holds_numpy_values(tmp_path):
    results = {"meta": {"gpu": "test"}, "anchors": [dict(_row(), visible_pairs=np.int64(7), x=np.float32(0.5),
                                                         arr=np.arange(3))]}
    path = tmp_path / "r.json"
    harness.save_json(results, str(path))
    back = json.loads(path.read_text())
    assert back["anchors"][0]["visible_pairs"] == 7 and back["anchors"][0]["arr"] == [0, 1, 2]
    harness.save_json(results, None)  # no path: nothing to do


def test_png(tmp_path):
    pytest.importorskip("matplotlib")
    results = {"meta": {"gpu": "test"}, "anchors": [_row(), _row("full")], "sweep": [_row("causal 1024")],
               "settings": {"systems": list(harness.SYSTEMS), "dtype": "bf16", "heads": 16, "head_dim": 128,
                            "family": "auto"}}
    path = tmp_path / "r.png"
    harness.save_png(results, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_imports_without_torch():
    """The harness is a script beside the package: importing it (and maskc) must not import torch."""
    import subprocess

    code = (f"import importlib.util, sys; spec = importlib.util.spec_from_file_location('h', {str(ROOT / 'bench' / 'harness.py')!r}); "
            "m = importlib.util.module_from_spec(spec); sys.modules['h'] = m; spec.loader.exec_module(m); "
            "import maskc; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
