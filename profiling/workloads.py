"""Workload registry (Castor §7: the profiler runs each DL job under many configurations).

The names are the workload catalog's (``conf/workloads.yaml``): the six Pollux applications
(``cifar10`` ResNet-18/CIFAR-10, ``imagenet`` ResNet-50/ImageNet, ``bert`` BERT-base/SQuAD,
``deepspeech2`` DeepSpeech2, ``ncf`` NeuMF/MovieLens, ``yolov3`` YOLOv3/PASCAL VOC) plus the Gimbal
Table 1 models the catalog lists for profiling (``vgg16``, ``mobilenetv2``, ``gpt``), so a profiled
configuration is one catalog entry (:func:`catalog_entry`) and fitted parameters replace the catalog's.

Every workload has a ``tiny`` size (CPU tests) and a ``full`` size (the real model for
GPUs).  Inputs are synthetic, generated once on the device with a fixed seed, so the
measurements contain no data loading.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import models_cnn as C
from . import models_seq as S

Batch = tuple[Tensor, ...]
SIZES = ("tiny", "full")


@dataclass(frozen=True)
class Workload:
    """A trainable model with its synthetic-batch generator and loss."""

    name: str
    model: str  # what the catalog's ``model`` / ``dataset`` fields say it is
    dataset: str
    build: Callable[[str], nn.Module]
    make_batch: Callable[[str, int, torch.Generator, torch.device], Batch]
    loss: Callable[[nn.Module, Batch], Tensor]


def _pick(size: str, tiny: Any, full: Any) -> Any:
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    return tiny if size == "tiny" else full


def _rand(shape: tuple[int, ...], g: torch.Generator, dev: torch.device) -> Tensor:
    return torch.randn(shape, generator=g, device="cpu").to(dev)


def _ints(high: int, shape: tuple[int, ...], g: torch.Generator, dev: torch.device) -> Tensor:
    return torch.randint(0, high, shape, generator=g, device="cpu").to(dev)


def _image(hw_tiny: int, hw_full: int, classes_tiny: int, classes_full: int) -> Callable[..., Batch]:
    def make(size: str, b: int, g: torch.Generator, dev: torch.device) -> Batch:
        hw, k = _pick(size, (hw_tiny, classes_tiny), (hw_full, classes_full))
        return _rand((b, 3, hw, hw), g, dev), _ints(k, (b,), g, dev)
    return make


def _ce(model: nn.Module, batch: Batch) -> Tensor:
    return F.cross_entropy(model(batch[0]), batch[1])


def _tokens(size: str, b: int, g: torch.Generator, dev: torch.device) -> Batch:
    vocab, seq = _pick(size, (100, 16), (30522, 128))
    return (_ints(vocab, (b, seq), g, dev),)


def _lm_tokens(size: str, b: int, g: torch.Generator, dev: torch.device) -> Batch:
    vocab, seq = _pick(size, (100, 16), (32000, 512))
    return (_ints(vocab, (b, seq + 1), g, dev),)


def _mlm_loss(model: nn.Module, batch: Batch) -> Tensor:
    ids = batch[0]
    logits = model(ids)
    return F.cross_entropy(logits.flatten(0, 1), ids.flatten())


def _lm_loss(model: nn.Module, batch: Batch) -> Tensor:
    ids = batch[0]
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


def _speech(size: str, b: int, g: torch.Generator, dev: torch.device) -> Batch:
    freq, frames, tgt = _pick(size, (32, 40, 8), (161, 500, 60))
    return _rand((b, 1, freq, frames), g, dev), _ints(28, (b, tgt), g, dev) + 1


def _ctc_loss(model: nn.Module, batch: Batch) -> Tensor:
    spec, tgt = batch
    logp = model(spec).float().transpose(0, 1)  # (T, B, C)
    t, b = logp.shape[0], logp.shape[1]
    in_len = torch.full((b,), t, dtype=torch.long, device=spec.device)
    tgt_len = torch.full((b,), tgt.shape[1], dtype=torch.long, device=spec.device)
    return F.ctc_loss(logp, tgt, in_len, tgt_len, zero_infinity=True)


def _ncf_batch(size: str, b: int, g: torch.Generator, dev: torch.device) -> Batch:
    users, items = _pick(size, (100, 50), (138493, 26744))
    return _ints(users, (b,), g, dev), _ints(items, (b,), g, dev), _ints(2, (b,), g, dev).float()


def _ncf_loss(model: nn.Module, batch: Batch) -> Tensor:
    return F.binary_cross_entropy_with_logits(model(batch[0], batch[1]).float(), batch[2])


def _detect(size: str, b: int, g: torch.Generator, dev: torch.device) -> Batch:
    hw, k = _pick(size, (64, 4), (416, 20))
    x = _rand((b, 3, hw, hw), g, dev)
    return x, _rand((b, 3 * (5 + k), hw // 32, hw // 32), g, dev)  # regression targets per cell


def _mse(model: nn.Module, batch: Batch) -> Tensor:
    return F.mse_loss(model(batch[0]).float(), batch[1])


WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("cifar10", "ResNet-18", "CIFAR-10", lambda s: C.resnet18(10, _pick(s, 8, 64)),
             _image(16, 32, 10, 10), _ce),
    Workload("imagenet", "ResNet-50", "ImageNet", lambda s: C.resnet50(_pick(s, 10, 1000), _pick(s, 8, 64)),
             _image(32, 224, 10, 1000), _ce),
    Workload("yolov3", "YOLOv3", "PASCAL VOC", lambda s: C.YoloV3(_pick(s, 4, 20), _pick(s, 4, 32)), _detect, _mse),
    Workload("vgg16", "VGG-16", "ImageNet",
             lambda s: C.VGG16(_pick(s, 10, 1000), _pick(s, 1 / 16, 1.0), _pick(s, 1, 7), _pick(s, 32, 4096)),
             _image(32, 224, 10, 1000), _ce),
    Workload("mobilenetv2", "MobileNetV2", "CIFAR-10", lambda s: C.MobileNetV2(10, _pick(s, 0.25, 1.0)),
             _image(32, 32, 10, 10), _ce),
    Workload("bert", "BERT-base", "SQuAD",
             lambda s: S.Encoder(*_pick(s, (100, 32, 2, 2, 64, 16), (30522, 768, 12, 12, 3072, 128))),
             _tokens, _mlm_loss),
    Workload("gpt", "GPT-2 small", "synthetic tokens",
             lambda s: S.Decoder(*_pick(s, (100, 32, 2, 2, 64, 16), (32000, 768, 12, 12, 3072, 512))),
             _lm_tokens, _lm_loss),
    Workload("deepspeech2", "DeepSpeech2", "CMU-ARCTIC",
             lambda s: S.DeepSpeech2(*_pick(s, (32, 16, 1, 29, 4), (161, 800, 5, 29, 32))), _speech, _ctc_loss),
    Workload("ncf", "NeuMF", "MovieLens",
             lambda s: S.NCF(*_pick(s, (100, 50, 8, (32, 16, 8)), (138493, 26744, 64, (256, 128, 64)))),
             _ncf_batch, _ncf_loss),
]}


def get(name: str) -> Workload:
    """Look up a workload by name."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; known: {sorted(WORKLOADS)}") from None


def catalog_entry(workload: str) -> str:
    """The workload catalog's entry for a profiled workload: the same name (one vocabulary)."""
    get(workload)
    return workload
