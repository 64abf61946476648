"""Every example parses, checks and lowers, and the workloads of ANCHORS.md keep their exact sizes."""

from pathlib import Path

import pytest

from maskc.front import read_file

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
N = 32768


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.mask")), ids=lambda p: p.stem)
def test_example_reads(path):
    program = read_file(path)
    assert program.name == path.stem
    assert program.regions


def test_every_workload_has_an_example():
    workloads = "full causal sliding_window document shared_prompt rm_shared hstu hstu_jagged clear clear_text"
    others = "prefix_lm chunked_causal sinks_window global_window dilated_window natten2d video3d block_sparse tree"
    assert {p.stem for p in EXAMPLES.glob("*.mask")} >= set((workloads + " " + others).split())


def defaults(name):
    program = read_file(EXAMPLES / f"{name}.mask")
    return {p.name: p.default for p in program.params}, program.batch


def test_packed_documents_fill_the_sequence():
    params, _ = defaults("document")
    assert len(params["docs"]) == 12 and sum(params["docs"]) == N


def test_shared_prompt_leaves_8192_tokens_to_the_prompt():
    params, _ = defaults("shared_prompt")
    assert params["responses"] == (4096,) * 6 and params["n"] - sum(params["responses"]) == 8192


def test_rm_shared_batch_is_nine_groups_of_32768_tokens():
    _, batch = defaults("rm_shared")
    groups = [dict(line) for line in batch]
    assert len(groups) == 9 and groups[-1] == {"prompt": 776, "responses": ()}
    assert sum(g["prompt"] + sum(g["responses"]) for g in groups) == N


def test_hstu_jagged_batch_lengths():
    params, batch = defaults("hstu_jagged")
    assert [dict(line)["n"] for line in batch] == [7955, 7809, 8202, 8802]
    assert (params["context"], params["targets"]) == (6, 256)


@pytest.mark.parametrize(
    "name, tokens",
    [("clear", lambda p: p["h"] * p["w"]), ("clear_text", lambda p: p["text"] + p["h"] * p["w"])],
)
def test_image_layouts_have_32768_tokens(name, tokens):
    params, _ = defaults(name)
    assert tokens(params) == N and params["r"] == 16
