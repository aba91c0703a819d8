"""Peak memory and time of whole-image inference, one size per process (issue 74, target 1).

For each family, mode and image size a fresh child process builds the model of the family's
shipped config (random weights, float32, batch 1, no pipeline: a random image at its native
size), runs one inference and reports its peak resident memory (``VmHWM``, reset after the
model is built, so it is the forward's peak plus the process's resident base) and wall time.
Modes:

* ``backbone``: the backbone's forward alone;
* ``upernet`` / ``semfpn``: mmseg's ``EncoderDecoder.predict`` in whole mode, today's default
  path (the logits resized to the image before the argmax);
* ``upernet_whole`` / ``semfpn_whole``: the same config with
  ``type='mmlinattn.WholeImageEncoderDecoder'`` and the striped neck and head
  (``mmlinattn.StripedUPerHead``; ``mmlinattn.StripedFPN`` and ``mmlinattn.StripedFPNHead``:
  ``docs/user_guides/whole_image.md``);
* ``retinanet``: mmdet's ``RetinaNet.predict`` of the family's RetinaNet config (weights as
  ``init_weights`` leaves them: the classifier's prior bias keeps the scores below the score
  threshold, as a trained model's are for almost every anchor);
* ``retinanet_whole``: the same config with ``bbox_head.type='mmlinattn.StripedRetinaHead'``
  (earlier records: ``type='mmlinattn.WholeImageRetinaNet'``, the same computation).

A family is ``ldn``, ``soft``, ``nalaformer``, ``infvit`` (their ``small``), ``swin_t`` or
``r50`` (mmseg's / mmdet's own configs), optionally with backbone options:
``soft:max_landmarks=49``.

Nothing takes the machine down: a run whose logits alone (classes x H x W float32, held twice
by mmseg's post-processing) exceed the cap is skipped from that estimate, and every child runs
under ``RLIMIT_AS`` = its address space after the build + (cap - its resident size), so an
allocation beyond the cap fails with an error (recorded as ``oom``) instead of the kernel's OOM
killer; after a failure the larger sizes of that family and mode are skipped.  glibc is made to
return freed blocks to the kernel (``return_freed_cpu_memory``), so the peak follows the live
tensors.  Each child runs under the shared lock (``--lock``), one process at a time.

    python dev/whole_image_memory.py --lock /tmp/mmlinattn-cpu.lock \\
        --families ldn swin_t --modes backbone upernet upernet_whole \\
        --sizes 1024 2048 4096 --cap-gb 18 --out records/whole_image/upernet_zen4.json
"""
import argparse
import json
import os
import os.path as osp
import subprocess
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIGS = {
    'upernet': 'configs/upernet_{family}_small_ade20k_160k.py',
    'semfpn': 'configs/semfpn_{family}_small_ade20k_40k.py',
    'retinanet': 'configs/retinanet_{family}_small_1x.py',
}
PEERS = {  # the peers' own configs in the installed mmseg / mmdet
    ('swin_t', 'upernet'): 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_'
                           'ade20k-512x512.py',
    ('swin_t', 'retinanet'): 'mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py',
    ('r50', 'upernet'): 'mmseg::upernet/upernet_r50_4xb4-160k_ade20k-512x512.py',
    ('r50', 'semfpn'): 'mmseg::sem_fpn/fpn_r50_4xb4-160k_ade20k-512x512.py',
    ('r50', 'retinanet'): 'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py',
}
PACKAGES = {'mmseg': 'mmsegmentation', 'mmdet': 'mmdet'}


def head_of(mode: str) -> str:
    return mode.split('_')[0] if mode != 'backbone' else 'upernet'


def parse_family(family: str):
    """``'soft:max_landmarks=49'`` -> ``('soft', {'max_landmarks': 49})``."""
    import ast
    name, *opts = family.split(':')
    return name, {k: ast.literal_eval(v) for k, v in (o.split('=', 1) for o in opts)}


def config_path(family: str, mode: str) -> str:
    head = head_of(mode)
    if family in ('swin_t', 'r50'):
        if (family, head) not in PEERS:
            raise SystemExit(f'{family}: no {head} config of the peer is measured')
        return PEERS[family, head]
    return osp.join(ROOT, CONFIGS[head].format(family=family))


def build(family: str, mode: str):
    import torch
    from mmengine.config import Config
    from mmengine.registry import DefaultScope

    import mmlinattn.models  # noqa: F401
    from mmlinattn.utils.external_configs import cache_external_config_index
    cache_external_config_index()
    family, options = parse_family(family)
    scope = 'mmdet' if head_of(mode) == 'retinanet' else 'mmseg'
    if scope == 'mmdet':
        from mmdet.registry import MODELS
        from mmdet.utils import register_all_modules
    else:
        from mmseg.registry import MODELS
        from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    path = config_path(family, mode)
    if '::' in path:  # a file of the installed mmseg / mmdet (the peer's own config)
        from mmengine.utils import get_installed_path
        package, _, rel = path.partition('::')
        path = osp.join(get_installed_path(PACKAGES[package]), '.mim', 'configs', rel)
    cfg = Config.fromfile(path)
    model_cfg = cfg.model
    model_cfg.backbone.update(options)
    model_cfg.backbone.init_cfg = None  # random weights: nothing to download
    model_cfg.pop('pretrained', None)
    model_cfg.backbone.pop('pretrained', None)
    model_cfg.data_preprocessor.pop('size', None)
    model_cfg.pop('auxiliary_head', None)  # not run at inference; keep its weights out
    if mode in ('upernet_whole', 'semfpn_whole'):
        model_cfg.type = 'mmlinattn.WholeImageEncoderDecoder'
        for part in ('neck', 'decode_head'):
            if model_cfg.get(part, {}).get('type') in ('UPerHead', 'FPN', 'FPNHead'):
                model_cfg[part].type = f'mmlinattn.Striped{model_cfg[part].type}'
    elif mode == 'retinanet_whole':
        model_cfg.bbox_head.type = 'mmlinattn.StripedRetinaHead'
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(model_cfg)
        if scope == 'mmdet':
            model.init_weights()
    from mmengine.model import revert_sync_batchnorm
    model = revert_sync_batchnorm(model).eval()
    torch.manual_seed(0)
    return model, scope


def child(family: str, mode: str, h: int, w: int, cap_mb: float, threads: int) -> dict:
    import torch
    from mmengine.registry import DefaultScope

    from benchlib.memory import (cap_address_space, current_rss_kb, is_oom, peak_rss_kb,
                                 reset_peak_rss, return_freed_cpu_memory)
    torch.set_num_threads(threads)
    return_freed_cpu_memory()
    model, scope = build(family, mode)
    x = torch.randn(1, 3, h, w)
    base_mb = current_rss_kb() / 1024
    cap_address_space(cap_mb - base_mb)
    reset_peak_rss()
    out = dict(family=family, mode=mode, size=[h, w], resident_before_mb=round(base_mb))
    start = time.perf_counter()
    try:
        with torch.no_grad(), DefaultScope.overwrite_default_scope(scope):
            if mode == 'backbone':
                model.backbone(x)
            elif scope == 'mmdet':
                from mmdet.structures import DetDataSample
                sample = DetDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w),
                                                     pad_shape=(h, w), scale_factor=(1., 1.)))
                pred = model.predict(x, [sample])[0].pred_instances
                out['detections'] = len(pred)
            else:
                from mmseg.structures import SegDataSample
                sample = SegDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w)))
                pred = model.predict(x, [sample])[0].pred_sem_seg.data
                assert tuple(pred.shape) == (1, h, w)
        out.update(status='ok', seconds=round(time.perf_counter() - start, 2))
    except Exception as err:  # noqa: BLE001 (recorded, the parent goes on)
        out.update(status='oom' if is_oom(err) else 'error', error=str(err)[:300],
                   seconds=round(time.perf_counter() - start, 2))
    out['peak_mb'] = round(peak_rss_kb() / 1024)
    return out


def logits_estimate_mb(family: str, mode: str, h: int, w: int, classes: int = 150) -> float:
    """What mmseg's plain whole mode holds at least: the logits at the image size, twice
    (predict_by_feat's resize, then postprocess_result's resize to ori_shape)."""
    if mode in ('upernet', 'semfpn'):
        return 2 * classes * h * w * 4 / 2**20
    return 0.0


def parse_size(s: str):
    h, _, w = s.partition('x')
    return int(h), int(w or h)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--families', nargs='+', default=['ldn'],
                   help='ldn soft nalaformer infvit (their small), swin_t, r50; options after '
                        'a colon: soft:max_landmarks=49')
    p.add_argument('--modes', nargs='+', default=['backbone', 'upernet', 'upernet_whole'])
    p.add_argument('--sizes', nargs='+', default=['1024', '2048'],
                   help='square sides or HxW, smallest first')
    p.add_argument('--cap-gb', type=float, default=18.0)
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--timeout', type=float, default=900)
    p.add_argument('--out', help='JSON file (records/whole_image/...)')
    p.add_argument('--append', action='store_true',
                   help='add the runs to those already in --out (one record of several calls)')
    p.add_argument('--lock', help='run each child under `flock LOCK` (the shared CPU lock), so '
                                  'other work can take turns between sizes')
    p.add_argument('--child', nargs=5, metavar=('FAMILY', 'MODE', 'H', 'W', 'CAP_MB'),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        family, mode, h, w, cap = args.child
        print(json.dumps(child(family, mode, int(h), int(w), float(cap), args.threads)))
        return

    from mmlinattn.utils.machine import cpu_name
    cap_mb = args.cap_gb * 1024
    # the code the children import (the working tree): its commit when the runs start
    commit = subprocess.run(['git', 'describe', '--always', '--dirty'], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    runs = []
    for family in args.families:
        for mode in args.modes:
            failed = False
            for size in args.sizes:
                h, w = parse_size(size)
                row = dict(family=family, mode=mode, size=[h, w])
                if failed:
                    row.update(status='skipped', reason='a smaller size failed')
                elif logits_estimate_mb(family, mode, h, w) > cap_mb:
                    row.update(status='skipped',
                               reason=f'logits alone {logits_estimate_mb(family, mode, h, w):.0f}'
                                      f' MiB > cap')
                else:
                    # the time limit starts once the lock is held (`flock LOCK timeout T ...`):
                    # waiting for another job's turn is not the run's time
                    cmd = ['timeout', str(args.timeout), sys.executable, osp.abspath(__file__),
                           '--threads', str(args.threads),
                           '--child', family, mode, str(h), str(w), str(cap_mb)]
                    if args.lock:
                        cmd = ['flock', args.lock] + cmd
                    # the working tree's package and measuring library (tools/analysis_tools)
                    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                        [ROOT, osp.join(ROOT, 'tools', 'analysis_tools'),
                         os.environ.get('PYTHONPATH', '')]))
                    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
                    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{')]
                    if proc.returncode == 124:
                        row.update(status='timeout', seconds=args.timeout)
                    else:
                        row = json.loads(lines[-1]) if lines else dict(
                            row, status='error', error=proc.stderr[-500:])
                failed = failed or row['status'] not in ('ok', 'skipped')
                print(json.dumps(row), flush=True)
                runs.append(row)
    record = dict(
        meta=dict(processor=cpu_name(), threads=args.threads, dtype='float32', batch=1,
                  commit=commit,
                  weights='random', cap_gb=args.cap_gb, date=time.strftime('%Y-%m-%d'),
                  command=' '.join(['python', 'dev/whole_image_memory.py'] + sys.argv[1:]),
                  peak='VmHWM of the child, reset after the model is built (includes the '
                       'resident base of the process, resident_before_mb)'),
        runs=runs)
    if args.out:
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
        if args.append and osp.isfile(args.out):
            with open(args.out) as f:
                old = json.load(f)
            commands = old['meta'].get('commands', [old['meta'].pop('command', '')])
            record['meta']['commands'] = commands + [record['meta'].pop('command')]
            record['runs'] = old['runs'] + runs
        with open(args.out, 'w') as f:
            json.dump(record, f, indent=1)


if __name__ == '__main__':
    main()
