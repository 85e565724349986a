"""Fit the workload catalog (Castor §3.1, eq. 1-3) to Pollux's measured T4 step times.

Writes the shipped ``conf/workloads.yaml``::

    python -m schedlab.tools.fit_catalog_from_pollux                       # print the fits only
    python -m schedlab.tools.fit_catalog_from_pollux --out conf/workloads.yaml

Data (never copied into the repository; read from ``--data``, default the development data folder):

* ``profiles/pollux/traces/<model>/placements.csv`` and ``scalability.csv`` -- Pollux (OSDI'21,
  github.com/petuum/adaptdl, branch osdi21-artifact, commit c793c708, ``simulator/traces``): measured time
  per training step (``step_time``) and its synchronisation part (``sync_time``) per placement and per-GPU
  batch size, on Pollux's testbed of AWS g4dn.12xlarge nodes (4 NVIDIA T4 GPUs each, Pollux §5).
* ``profiles/gavel/simulation_throughputs.json`` -- Gavel (OSDI'20) measured steps/s on K80/P100/V100,
  used only for the per-GPU-type relative speed factors (ResNet-18/-50, the models both data sets share).
* ``profiles/elasticflow/elasticflow_throughputs_A100/resnet50.csv`` -- ElasticFlow's (ASPLOS'23) A100
  throughput table (iterations/s of the global batch; staged without a README), for the A100 factor.

Model fitted per workload (all times in seconds per iteration, s = 1 in the data):

* eq. 1  ``t_comp(B) = a_comp + b_comp * B``                             (B = per-GPU batch)
* eq. 2  ``t_comm = alpha(N) + beta(N) * M`` with the ring all-reduce alpha-beta cost of Castor's
  refs [40]/[41] (Rabenseifner; Thakur et al.): ``alpha(N) = 2 (N-1) a_scope``,
  ``beta(N) = 2 (N-1)/N b_scope``; ``scope`` = ``intra`` when the job sits on one server, ``inter``
  otherwise; M = model size in MB; ``t_comm = 0`` for N = 1.
* eq. 3  ``t_iter = (s-1) t_comp(B/s) + (t_comp(B/s)^delta + t_comm^delta)^(1/delta)``.

Objective: bounded least squares (``scipy.optimize.least_squares``) on the relative error of the
predicted ``step_time``; the three groups of rows (1 GPU / one server / several servers) get equal total
weight so that the many multi-server rows do not swamp the single-GPU compute fit. Several starting
values of delta are tried and the lowest cost is kept. MAPE is reported per group and overall.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab.benchmarks.common import DATA
from schedlab.profiling.fitting import fit_eq3, load_pollux

GPU_TYPE = "t4"
GPUS_PER_NODE_POLLUX = 4  # g4dn.12xlarge

# Per workload: what the Pollux trace measures, the model size M (parameters x 4 bytes), the per-GPU
# batch sizes the annotator may assign (all inside the measured local_bsz range, so no extrapolation),
# and the reference batch for the memory estimate. Parameter counts are from the model papers /
# standard implementations; "approx" marks counts estimated from the architecture.
WORKLOADS: dict[str, dict] = {
    "cifar10": {
        "model": "ResNet-18",
        "dataset": "CIFAR-10",
        "params_m": 11.17,
        "params_source": "ResNet-18, CIFAR-10 variant (He et al. 2016): 11.17M parameters",
        "batch_sizes": [32, 64, 128],
        "reference_batch": 128,
        "batch_source": "Gimbal Table 1 (RN18/CIFAR-10: 32, 64, 128); Pollux initial batch 128",
    },
    "ncf": {
        "model": "NeuMF",
        "dataset": "MovieLens",
        "params_m": 0.39,
        "params_source": "NeuMF (He et al. 2017) on MovieLens-1M, 8/32-dim GMF/MLP embeddings: ~0.39M (approx)",
        "batch_sizes": [256, 512, 1024],
        "reference_batch": 256,
        "batch_source": "Pollux initial batch 256 (smallest validation-<bsz>.csv) and 2x, 4x",
    },
    "deepspeech2": {
        "model": "DeepSpeech2",
        "dataset": "CMU-ARCTIC",
        "params_m": 87.0,
        "params_source": "DeepSpeech2 (Amodei et al. 2016), 2 conv + 5 bi-LSTM(1024) layers: ~87M (approx)",
        "batch_sizes": [10, 20, 40],
        "reference_batch": 20,
        "batch_source": "Pollux initial batch 20 and 0.5x, 2x (Gimbal Table 1 uses 8, 16 on A40)",
    },
    "bert": {
        "model": "BERT-base",
        "dataset": "SQuAD",
        "params_m": 110.0,
        "params_source": "BERT-base (Devlin et al. 2019): 110M parameters",
        "batch_sizes": [4, 8, 12],
        "reference_batch": 12,
        "batch_source": "Pollux initial batch 12 (= its largest local batch on a 16 GB T4)",
    },
    "yolov3": {
        "model": "YOLOv3",
        "dataset": "PASCAL VOC",
        "params_m": 61.9,
        "params_source": "YOLOv3 / Darknet-53 (Redmon & Farhadi 2018): 61.9M parameters",
        "batch_sizes": [4, 8, 16],
        "reference_batch": 8,
        "batch_source": "Pollux initial batch 8 and 0.5x, 2x",
    },
    "imagenet": {
        "model": "ResNet-50",
        "dataset": "ImageNet",
        "params_m": 25.56,
        "params_source": "ResNet-50 (He et al. 2016): 25.56M parameters",
        "batch_sizes": [32, 64, 128],
        "reference_batch": 128,
        "batch_source": "Gimbal Table 1 (RN50/ImageNet: 32, 64, 128); Pollux local batches 20-200",
    },
}

# Size classes: Castor §9.1 and SJF-BSBF §VI-A follow Pollux's settings, and Pollux's
# simulator/workload.py maps each Philly job's GPU time to a model by bucket:
# < 1 GPU-h cifar10/ncf, < 10 GPU-h deepspeech2/bert, < 100 GPU-h yolov3, else imagenet.
# Gimbal §7.1 uses the same idea (small / middle / large workload classes, random model within a class).
SIZE_CLASSES = [
    {"name": "small", "max_gpu_hours": 1.0, "models": ["cifar10", "ncf"]},
    {"name": "medium", "max_gpu_hours": 10.0, "models": ["deepspeech2", "bert"]},
    {"name": "large", "max_gpu_hours": 100.0, "models": ["yolov3"]},
    {"name": "xlarge", "max_gpu_hours": None, "models": ["imagenet"]},
]

T4_MEMORY_GIB = 15.0  # 16 GB T4 = 14.9 GiB; what a job can use is at most this


def fit_model(df: pd.DataFrame, model_mb: float) -> tuple[dict, dict]:
    """Bounded least squares of eq. 1-3 on one workload's Pollux rows (the shared fitting routine,
    :func:`schedlab.profiling.fitting.fit_eq3`). Returns (params, in-sample mape_by_group)."""
    fit = fit_eq3(df, model_mb, time="step_time", batch="local_bsz")
    return fit.params, fit.mape


def _round(v: float) -> float:
    """6 significant digits; fitted values at the zero bound (< 1e-12) are written as 0."""
    return 0.0 if abs(v) < 1e-12 else float(f"{v:.6g}")


def memory_entry(name: str, meta: dict, max_bsz: int) -> dict:
    """Upper-bound memory estimate (not a measurement): Pollux trained ``max_bsz`` per GPU on a 16 GB T4.

    static = weights + gradients + two optimizer moments (4 x model size); activations assumed linear in
    the batch and at most filling the T4 at ``max_bsz``: mem(B) <= static + (15 GiB - static) * B / max_bsz.
    """
    static = 4 * meta["params_m"] * 4e6 / 2**30
    ref = meta["reference_batch"]
    gib = static + (T4_MEMORY_GIB - static) * ref / max_bsz
    return {
        "reference_batch": ref,
        "gib": round(gib, 3),
        "static_gib": round(static, 3),
        "provenance": (
            f"upper-bound estimate, not measured: Pollux ran per-GPU batch up to {max_bsz} on a 16 GB T4; "
            f"static = 4 x model size (weights, grads, 2 optimizer moments), activations linear in batch: "
            f"static + ({T4_MEMORY_GIB:g} GiB - static) x B / {max_bsz}"
        ),
    }


def gpu_speed_factors(data: Path, t4_params: dict[str, dict]) -> dict[str, dict]:
    """Relative compute speed (t_T4 / t_X at equal per-GPU batch, geometric mean) of other GPU types."""
    out: dict[str, dict] = {
        GPU_TYPE: {
            "speed": 1.0,
            "memory_gib": 15.0,
            "provenance": "reference type: Pollux testbed, AWS g4dn.12xlarge (4 x NVIDIA T4 16 GB per node)",
        }
    }

    def t4_time(model: str, b: float) -> float:
        p = t4_params[model]
        return p["alpha_comp"] + p["beta_comp"] * b

    gavel_file = data / "profiles" / "gavel" / "simulation_throughputs.json"
    if gavel_file.exists():
        thr = json.loads(gavel_file.read_text())
        pairs = {"ResNet-18": "cifar10", "ResNet-50": "imagenet"}
        mem = {"k80": 11.2, "p100": 15.9, "v100": 15.8}  # 12 GB K80 die, 16 GB P100/V100, in GiB
        for wt in ("k80", "p100", "v100"):
            ratios = []
            for key, val in thr[wt].items():
                job, sf = key.strip("()").rsplit(",", 1)
                job = job.strip().strip("'")
                if int(sf) != 1 or "(batch size" not in job:
                    continue
                base, b = job.split(" (batch size ")
                if base not in pairs:
                    continue
                b = float(b.rstrip(")"))
                ratios.append(t4_time(pairs[base], b) * float(val["null"]))
            speed = float(np.exp(np.mean(np.log(ratios))))
            out[wt] = {
                "speed": round(speed, 4),
                "memory_gib": mem[wt],
                "provenance": (
                    "Gavel simulation_throughputs.json (commit c4fa400), 1-GPU ResNet-18/ResNet-50 steps/s at "
                    f"batch 16-256 vs the T4 t_comp fit of cifar10/imagenet at the same batch; geometric mean "
                    f"of {len(ratios)} ratios"
                ),
            }
    ef_file = data / "profiles" / "elasticflow" / "elasticflow_throughputs_A100" / "resnet50.csv"
    if ef_file.exists():
        ef = pd.read_csv(ef_file)
        ratios = [
            t4_time("imagenet", float(r.global_batch_size)) * float(r["1"])
            for _, r in ef.iterrows()
            if float(r["1"]) > 0
        ]
        out["a100"] = {
            "speed": round(float(np.exp(np.mean(np.log(ratios)))), 4),
            "memory_gib": 37.3,  # 40 GB A100
            "provenance": (
                "ElasticFlow elasticflow_throughputs_A100/resnet50.csv (staged without README), 1-GPU "
                "iterations/s at global batch 64-256 (assumed = per-GPU batch) vs the T4 t_comp fit of "
                f"imagenet; geometric mean of {len(ratios)} ratios"
            ),
        }
        out["a40"] = a40_entry(out["a100"]["speed"])
    return out


#: NVIDIA datasheets: A40 37.4 TFLOPS FP32, 696 GB/s; A100 40 GB 19.5 TFLOPS FP32, 1,555 GB/s.
A40_VS_A100 = float(np.sqrt((37.4 / 19.5) * (696.0 / 1555.0)))


def a40_entry(a100_speed: float) -> dict:
    """The A40 of Gimbal's testbed (§7.1): no measured throughput in the shared data, so the measured
    A100 factor times the geometric mean of the datasheet FP32 and memory-bandwidth ratios (an
    assumption until the profiler measures it; trace durations are replayed as given, so this only
    converts durations into iterations)."""
    return {
        "speed": round(a100_speed * A40_VS_A100, 4),
        "memory_gib": 44.7,  # 48 GB
        "provenance": (
            "not measured: the a100 factor x sqrt(FP32 ratio 37.4/19.5 TFLOPS x memory-bandwidth ratio 696/1555 GB/s)"
            f" = a100 x {A40_VS_A100:.4f} (NVIDIA A40 and A100 40 GB datasheets); Gimbal §7.1 testbed GPU (48 GB)"
        ),
    }


#: Gimbal Table 1 models the profiler also runs (``profiling/workloads.py``): catalog entries without
#: published parameters (none in the shared data); theirs come from ``schedlab fit iteration-time``.
PROFILED_ONLY = {
    "vgg16": {"model": "VGG-16", "dataset": "ImageNet", "batch_sizes": [32, 64, 128], "model_size_mb": 553.43,
              "provenance": "Gimbal Table 1 (VGG-16/ImageNet, batch 32, 64, 128); model size: profiling/workloads.py "
                            "vgg16 full, 138.36M parameters; no published step times: parameters only from a fit"},
    "mobilenetv2": {"model": "MobileNetV2", "dataset": "CIFAR-10", "batch_sizes": [32, 64, 128], "model_size_mb": 8.947,
                    "provenance": "Gimbal Table 1 (MNV2/CIFAR-10, batch 32, 64, 128); model size: profiling/workloads.py "
                                  "mobilenetv2 full, 2.24M parameters; no published step times: parameters only from a fit"},
    "gpt": {"model": "GPT-2 small", "dataset": "synthetic tokens", "batch_sizes": [4, 8, 16], "model_size_mb": 440.101,
            "provenance": "decoder-only LM standing in for Gimbal Table 1's LLaMA fine-tuning (conf/sweeps/nightly.yaml "
                          "batch 4, 8, 16); model size: profiling/workloads.py gpt full, 110.03M parameters; no published "
                          "step times: parameters only from a fit"},
}


def build_catalog(data: Path, verbose: bool = True) -> dict:
    traces = data / "profiles" / "pollux" / "traces"
    workloads: dict[str, dict] = {}
    for name, meta in WORKLOADS.items():
        df = load_pollux(traces / name)
        model_mb = meta["params_m"] * 4.0  # fp32: parameters x 4 bytes, in MB (1e6 bytes)
        params, mape = fit_model(df, model_mb)
        if verbose:
            print(
                f"{name:12s} " + " ".join(f"{k}={v:.4g}" for k, v in params.items())
                + f" | MAPE single={mape['single']:.1%} intra={mape['intra']:.1%} "
                f"inter={mape['inter']:.1%} all={mape['all']:.1%} (n={mape['rows']})"
            )
        workloads[name] = {
            "model": meta["model"],
            "dataset": meta["dataset"],
            "batch_sizes": meta["batch_sizes"],
            "model_size_mb": round(model_mb, 3),
            "memory": memory_entry(name, meta, int(df["local_bsz"].max())),
            "gpu_params": {GPU_TYPE: {k: _round(v) for k, v in params.items()}},
            "fit_mape": {GPU_TYPE: {k: round(v, 4) if isinstance(v, float) else v for k, v in mape.items()}},
            "provenance": (
                f"eq.1-3 fitted by schedlab.tools.fit_catalog_from_pollux to Pollux measured step_time "
                f"(adaptdl osdi21-artifact c793c708 simulator/traces/{name}/placements.csv + scalability.csv, "
                f"{mape['rows']} rows, T4 nodes with 4 GPUs); model size: {meta['params_source']}; "
                f"batch sizes: {meta['batch_source']}"
            ),
        }
    t4 = {k: v["gpu_params"][GPU_TYPE] for k, v in workloads.items()}
    for name, meta in PROFILED_ONLY.items():
        workloads[name] = {"model": meta["model"], "dataset": meta["dataset"], "batch_sizes": meta["batch_sizes"],
                           "model_size_mb": meta["model_size_mb"], "gpu_params": {}, "provenance": meta["provenance"]}
    gpu_types = gpu_speed_factors(data, t4)
    if verbose:
        for k, v in gpu_types.items():
            print(f"gpu {k:5s} speed={v['speed']}")
    return {
        "version": 1,
        "reference_gpu_type": GPU_TYPE,
        "gpu_types": gpu_types,
        "size_classes": [
            dict(c, provenance="Castor §9.1 / SJF-BSBF §VI-A follow Pollux: simulator/workload.py GPU-hour "
                 "buckets (<1 cifar10/ncf, <10 deepspeech2/bert, <100 yolov3, else imagenet); "
                 "cf. Gimbal §7.1 small/middle/large classes")
            for c in SIZE_CLASSES
        ],
        "workloads": workloads,
    }


HEADER = """\
# Workload catalog: Castor §3.1 iteration-time model (eq. 1-3) per workload and GPU type.
# GENERATED by `python -m schedlab.tools.fit_catalog_from_pollux --out conf/workloads.yaml` from the development
# data (Pollux measured T4 step times, Gavel / ElasticFlow throughputs for GPU speed factors). Do not edit the
# numbers by hand: re-run the tool.
#
#   t_comp(B) = alpha_comp + beta_comp * B                 (eq. 1; B = per-GPU (sub-)batch, seconds)
#   t_comm    = 2(N-1) alpha_comm_X + 2(N-1)/N beta_comm_X * M   (eq. 2 with ring all-reduce alpha(N), beta(N),
#               X = intra if the job spans one server else inter; M = model_size_mb; 0 when N = 1)
#   t_iter    = (s-1) t_comp(B/s) + (t_comp(B/s)^delta + t_comm^delta)^(1/delta)   (eq. 3)
#
# fit_mape: mean absolute percentage error of the fitted step time per row group (1 GPU / one server /
# several servers). memory: an upper-bound estimate, see each entry's provenance.
# Entries with gpu_params: {} (vgg16, mobilenetv2, gpt) are profiled-only: annotation never assigns them and their
# parameters come from a fitted iteration-time model (schedlab replay --iteration-time).
# gpu_types.speed: compute speed relative to the reference type; a workload without parameters for a GPU
# type uses the reference type's with alpha_comp, beta_comp divided by speed (communication unchanged).
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="development data folder")
    ap.add_argument("--out", type=Path, default=None, help="write the catalog YAML here")
    args = ap.parse_args(argv)
    if not (args.data / "profiles" / "pollux" / "traces").is_dir():
        print(f"no Pollux traces under {args.data}", file=sys.stderr)
        return 2
    catalog = build_catalog(args.data)
    if args.out is not None:
        import yaml

        text = yaml.safe_dump(catalog, sort_keys=False, allow_unicode=True, width=110)
        args.out.write_text(HEADER + text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
