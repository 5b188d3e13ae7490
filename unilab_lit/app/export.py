"""``python -m unilab_lit.app.export --ckpt_path PATH --output policy.onnx``: the deployable policy.

Writes the deterministic policy with the observation normaliser folded in (raw policy
observations in, actions out) as ONNX and as a ``torch.export`` ExportedProgram (``.pt2``),
each with the run's metadata:
observation and action sizes, task, algorithm, action bounds and how actions are scaled, and
what a deployment script needs for a robot (the task's ``deployment_metadata()``): joint names
in action order, default joint positions, the action map, actuator gains, effort limits and the
observation layout.

No TorchScript: ``torch.jit.trace/save/load`` warn as deprecated from torch 2.14 on, and the
``.pt2`` is their successor (``torch.export.load(path).module()`` is a plain ``nn.Module``).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from unilab_lit.app.cli_io import OutputError, check_output, checkpoint_parser, one_line
from unilab_lit.app.trained_run import RunLoadError, TrainedRun, load_trained_run
from unilab_lit.checkpoint_io import partial_file

INPUT_NAME = "obs"
OUTPUT_NAME = "actions"
PROGRAM_SUFFIX = ".pt2"
METADATA_FILE = "metadata.json"
"""Name of the metadata in the ``.pt2`` archive (``torch.export.load(..., extra_files=...)``)."""
# The extra (pyproject.toml) that brings onnx, to write the file, and onnxruntime, to run it.
ONNX_EXTRA_INSTALL = 'pip install -e ".[onnx]"'

# The env clips actions to its bounds and hands them to the task, which maps them to actuator
# controls: for a MuJoCo task with the affine map it declares, for a gymnasium env as they are.
_ACTION_MAP = "clip to [action_low, action_high], then ctrl = action_offset + action_scale * action"
_AS_THEY_ARE = "clip to [action_low, action_high]; no rescaling"


def policy_metadata(run: TrainedRun) -> dict[str, Any]:
    """What a consumer of the exported policy needs to feed it and apply its actions.

    The task's deployment metadata (:meth:`~unilab_lit.envs.base.BatchedMujocoEnv.deployment_metadata`)
    is merged in, one key per entry.
    """
    spec, deployment = run.task_facts()
    model = run.model
    return {
        "task": run.task.class_path,
        "task_init_args": json.dumps(run.task.init_args, sort_keys=True),
        "algorithm": f"{type(model).__module__}.{type(model).__name__}",
        "global_step": run.global_step,
        "obs_size": spec.policy_obs_size,
        "action_size": spec.action_size,
        "action_low": [float(v) for v in spec.action_low],
        "action_high": [float(v) for v in spec.action_high],
        "action_scaling": _ACTION_MAP if "action_scale" in deployment else _AS_THEY_ARE,
        "control_dt": spec.control_dt,
        "observation_normalizer": "folded in: the input is the raw policy observation",
        "input": INPUT_NAME,
        "output": OUTPUT_NAME,
        **deployment,
    }


def export_policy(run: TrainedRun, onnx_path: Path, program_path: Path) -> dict[str, Any]:
    """Write ``run``'s deterministic policy as ONNX and as an ExportedProgram; returns the metadata.

    Both files are written to temporary names in their directories and renamed at the end, so
    a failure leaves no partial file behind.

    Raises:
        RuntimeError: If the ``onnx`` package is missing (one line naming the ``onnx`` extra).
        OSError: If a file cannot be written.
    """
    try:
        import onnx
    except ImportError as err:
        raise RuntimeError(
            f"ONNX export needs the onnx package, which the onnx extra brings: {ONNX_EXTRA_INSTALL}"
        ) from err
    metadata = policy_metadata(run)
    policy = run.model.inference_policy().eval()
    # Two rows: torch.export specialises a dimension of size 1, and the batch stays dynamic.
    example = torch.zeros(2, metadata["obs_size"])
    with (
        _temporary_next_to(onnx_path) as onnx_tmp,
        # Named *.pt2: torch.export.save warns of any other name.
        _temporary_next_to(program_path, keep_suffix=True) as program_tmp,
    ):
        _write_onnx(policy, example, onnx_tmp)
        model = onnx.load(str(onnx_tmp))
        for key, value in metadata.items():
            entry = model.metadata_props.add()
            entry.key = key
            entry.value = value if isinstance(value, str) else json.dumps(value)
        onnx.save(model, str(onnx_tmp))
        with torch.no_grad():
            program = torch.export.export(
                policy, (example,), dynamic_shapes=({0: torch.export.Dim("batch")},)
            )
        torch.export.save(program, program_tmp, extra_files={METADATA_FILE: json.dumps(metadata)})
        onnx_tmp.replace(onnx_path)
        program_tmp.replace(program_path)
    return metadata


def _write_onnx(policy: nn.Module, example: torch.Tensor, path: Path) -> None:
    # The TorchScript-based exporter: a few hundred ms for an MLP and no onnxscript, where the
    # dynamo exporter takes seconds and logs pages; the batch dimension stays dynamic. torch
    # marks it deprecated (DeprecationWarning on 2.13, FutureWarning where torch.jit is), so
    # both are silenced here, for this call only.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        torch.onnx.export(
            policy,
            (example,),
            str(path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            dynamo=False,
        )


@contextmanager
def _temporary_next_to(target: Path, keep_suffix: bool = False) -> Iterator[Path]:
    """A :func:`~unilab_lit.checkpoint_io.partial_file` beside ``target``, removed on exit unless
    renamed meanwhile."""
    file, path = partial_file(target, keep_suffix)
    file.close()
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def _parser() -> argparse.ArgumentParser:
    parser = checkpoint_parser(
        "python -m unilab_lit.app.export",
        "Export a trained policy (observation normaliser folded in) as ONNX and as a "
        "torch.export ExportedProgram (.pt2), with its observation/action sizes, task and action bounds as metadata.",
    )
    parser.add_argument("--output", required=True, help="the .onnx file to write")
    parser.add_argument(
        "--pt2",
        help="the ExportedProgram file to write (default: --output with the suffix .pt2)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 with a one-line ``error:`` on bad input)."""
    args = _parser().parse_args(argv)
    try:
        onnx_path = check_output(args.output, ".onnx", "--output")
        program = args.pt2 or str(onnx_path.with_suffix(PROGRAM_SUFFIX))
        program_path = check_output(program, PROGRAM_SUFFIX, "--pt2")
        run = load_trained_run(args.ckpt_path, args.run_dir, args.config)
        metadata = export_policy(run, onnx_path, program_path)
    except (OutputError, RunLoadError, RuntimeError, OSError) as err:
        sys.stderr.write(f"error: {one_line(err)}\n")
        return 2
    sys.stdout.write(
        f"{metadata['algorithm']} on {metadata['task']} (step {metadata['global_step']}): "
        f"obs {metadata['obs_size']} -> actions {metadata['action_size']}\n"
        f"onnx: {onnx_path}\npt2: {program_path}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
