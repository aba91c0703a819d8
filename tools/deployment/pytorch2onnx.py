"""Export a detector, segmentor or backbone to ONNX, with dynamic H and W.

    python tools/deployment/pytorch2onnx.py CONFIG [CHECKPOINT] --out model.onnx
        [--shape H W] [--dynamic] [--opset N] [--backbone-only]
        [--verify H W [--verify H W ...]] [--runtime onnxruntime|openvino]
        [--cfg-options k=v ...]

The graph takes the pre-processing-normalised batch (what the data preprocessor hands
the model: ``(B, 3, H, W)`` float32, mean/std applied, padded) and returns tensors: the
backbone's feature maps (``--backbone-only``), a one-stage detector's per-level class
scores then box deltas, or a segmentor's logits at the decoder's stride.  A two-stage
detector (Faster / Mask R-CNN) is written as ``OUT`` (image -> FPN features, RPN scores and
deltas) and its RoI stages beside it, ``OUT`` with ``.bbox.onnx`` and ``.mask.onnx``
((features, RoIs) -> head tensors).  Box decoding, NMS and resizing to the image stay in
Python (docs/user_guides/deployment.md).  ``--dynamic``
exports H and W as symbolic sizes (the batch size stays the one of ``--shape``'s example,
1); without it the graph only runs at ``--shape``.  Without CHECKPOINT the weights are the
config's random initialisation (enough to check export and parity).

``--verify H W`` runs the exported graph in ``--runtime`` at that size on a random input
and prints its max relative difference (max |onnx - eager| / max |eager|, worst output)
against eager PyTorch; the exit status is 1 when one exceeds ``--tolerance`` and, against
eager in float64, four times float32 eager's own error there (a trained network's float32
rounding alone can exceed ``--tolerance``).
"""
import argparse
import os
import os.path as osp
import sys
import time

import torch
from mmengine.config import DictAction

from mmlinattn.engine.runner import build_config_model
from mmlinattn.deployment import RUNTIMES, TensorGraph, export_onnx, load_runtime
from mmlinattn.deployment.runtimes import difference_from_eager
from mmlinattn.deployment.roi_graph import export_roi_graphs, roi_difference


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='export a model to ONNX (dynamic H, W)')
    parser.add_argument('config', help='config file of the detector / segmentor')
    parser.add_argument('checkpoint', nargs='?', help='weights (default: random init)')
    parser.add_argument('--out', required=True, help='path of the .onnx file to write')
    parser.add_argument('--shape', type=int, nargs=2, default=(224, 320), metavar=('H', 'W'),
                        help='size of the example input traced at export (default 224 320)')
    parser.add_argument('--dynamic', action='store_true',
                        help='symbolic H and W: one graph for sizes 64..8192 (or from the larger '
                             'minimum a model needs, which the log states)')
    parser.add_argument('--opset', type=int, default=18, help='ONNX opset (default 18)')
    parser.add_argument('--backbone-only', action='store_true',
                        help="export the config's backbone alone")
    parser.add_argument('--verify', type=int, nargs=2, action='append', metavar=('H', 'W'),
                        help='check the graph against eager at this size (repeatable)')
    parser.add_argument('--runtime', choices=RUNTIMES, default='onnxruntime',
                        help='runtime for --verify (default onnxruntime)')
    parser.add_argument('--tolerance', type=float, default=1e-4,
                        help='largest accepted relative difference for --verify')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings')
    args = parser.parse_args(argv)
    if min(args.shape) < 32:
        parser.error(f'--shape must be at least 32 x 32, got {args.shape}')
    if args.verify and not args.dynamic and any(tuple(v) != tuple(args.shape)
                                               for v in args.verify):
        parser.error('--verify at a size other than --shape needs --dynamic')
    return args


def load_weights(model, checkpoint: str) -> None:
    from mmlinattn.utils.checkpoint import check_model_checkpoint, safe_load_checkpoint
    ckpt = safe_load_checkpoint(checkpoint, map_location='cpu')
    report = check_model_checkpoint(model, ckpt, checkpoint)  # refuses a partial match
    state = ckpt.get('state_dict', ckpt)
    model.load_state_dict({k[7:] if k.startswith('module.') else k: v
                           for k, v in state.items()}, strict=False)
    print(f"loaded {checkpoint}: {len(report['matched'])} tensors, "
          f"{100 * report['fraction']:.1f} % of the parameters")


def main(argv=None) -> int:
    args = parse_args(argv)
    from mmlinattn.utils.external_configs import prepare_external_configs
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    if not osp.isfile(args.config):
        print(f'config not found: {args.config}', file=sys.stderr)
        return 2
    model, _ = build_config_model(args.config, args.cfg_options)
    if args.checkpoint:
        load_weights(model, args.checkpoint)
    graph = TensorGraph(model.backbone if args.backbone_only else model).eval()
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    example = torch.randn(1, 3, *args.shape)
    start = time.perf_counter()
    export_onnx(graph, example, args.out, dynamic_hw=args.dynamic, opset=args.opset)
    if graph.kind == 'two_stage':
        export_roi_graphs(model, features(graph, example), args.out,
                          dynamic_hw=args.dynamic, opset=args.opset)
    print(f'exported {graph.kind} of {args.config} to {args.out} '
          f'({"dynamic H, W" if args.dynamic else "fixed %d x %d" % tuple(args.shape)}, '
          f'opset {args.opset}, {time.perf_counter() - start:.0f} s)')
    if not args.verify:
        return 0
    run = load_runtime(args.out, args.runtime)
    failed = False
    for h, w in args.verify:
        x = torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(h * 10007 + w))
        with torch.no_grad():
            refs = graph(x)
        # beyond --tolerance the graph is judged against eager in float64 (see
        # difference_from_eager): a trained network's float32 error alone can pass it
        diffs = {'': difference_from_eager(run(x), graph, x, args.tolerance, refs)}
        if graph.kind == 'two_stage':  # the RoI stages on the eager features of x
            diffs.update({f' ({head} RoI stage)': (diff, args.tolerance)
                          for head, diff in roi_difference(
                              model, refs[:len(refs) // 3], args.out, args.runtime).items()})
        for stage, (diff, allowed) in diffs.items():
            failed |= not diff <= allowed
            line = f'{args.runtime} {h} x {w}{stage}: max relative difference vs eager'
            if allowed > args.tolerance:
                line += ' in float64'
            line += f' {diff:.2e}'
            if allowed > args.tolerance:
                line += f' (allowed {allowed:.1e}: 4x float32 eager\'s own)'
            if not diff <= allowed:
                line += f'  > allowed {allowed:.1e}'
            print(line)
    return int(failed)


def features(graph: TensorGraph, x):
    """A two-stage graph's FPN features for ``x`` (the first third of its outputs)."""
    with torch.no_grad():
        outs = graph(x)
    return outs[:len(outs) // 3]


if __name__ == '__main__':
    sys.exit(main())
