"""Every workload trains one step at its tiny size on the CPU; real sizes are real."""
from __future__ import annotations

import pytest
import torch
from schedlab.profiling import runner
from schedlab.profiling.workloads import WORKLOADS, get

NAMES = ["cifar10", "imagenet", "yolov3", "vgg16", "mobilenetv2", "bert", "gpt", "deepspeech2", "ncf"]


def test_registry() -> None:
    assert sorted(WORKLOADS) == sorted(NAMES)
    with pytest.raises(KeyError, match="unknown workload"):
        get("alexnet")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "imagenet" else n  # seconds
                                  for n in NAMES])
def test_tiny_step(name: str) -> None:
    w = get(name)
    model = w.build("tiny")
    g = torch.Generator().manual_seed(0)
    batch = w.make_batch("tiny", 2, g, torch.device("cpu"))
    loss = w.loss(model, batch)
    loss.backward()
    assert torch.isfinite(loss)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_real_sizes() -> None:
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert 11.0e6 < n(get("cifar10").build("full")) < 11.4e6  # CIFAR ResNet-18
    assert 25.4e6 < n(get("imagenet").build("full")) < 25.8e6
    assert get("imagenet").make_batch("full", 1, torch.Generator(), torch.device("cpu"))[0].shape == (1, 3, 224, 224)


@pytest.mark.slow
def test_runner_in_process_with_amp_and_accum() -> None:
    res = runner.run({"workload": "ncf", "batch": 4, "accum": 2, "warmup": 1, "iters": 3, "amp": True,
                      "device": "cpu", "threads": 1})
    assert res["status"] == "ok" and len(res["iter_times_s"]) == 3
    assert res["throughput"] == pytest.approx(8 / (sum(res["iter_times_s"]) / 3))
    assert res["window_end"] >= res["window_start"] and res["peak_mem_bytes"] > 0


def test_one_vocabulary_with_the_catalog() -> None:
    """Every profiled workload is exactly one catalog entry, of the same model and dataset; the six Pollux
    applications are all profiled; the YOLOv3 stand-in is Darknet-53-sized."""
    from schedlab.profiling.workloads import catalog_entry
    from schedlab.sched.models.workloads import default_catalog

    catalog = default_catalog()
    for name, w in WORKLOADS.items():
        entry = catalog.workload(catalog_entry(name))
        assert (entry.model, entry.dataset) == (w.model, w.dataset), name
    assert set(catalog.annotated_models) == {"cifar10", "imagenet", "bert", "deepspeech2", "ncf", "yolov3"}
    assert set(catalog.models) == set(WORKLOADS)
    n = sum(p.numel() for p in get("yolov3").build("full").parameters())
    assert 40e6 < n < 62e6  # Darknet-53 (40.6M) + one head; YOLOv3's full neck is 61.9M
    with pytest.raises(KeyError, match="profiled only"):
        catalog.params("vgg16")
