# Semantic FPN on the authors' NaLaFormer model: their code's attention, OFFICIAL_PRESET
# (mmlinattn/models/backbones/nalaformer.py), not the paper's kernel of semfpn_nalaformer.py.
# Weights: the configs fine-tune the ImageNet-1k file
# checkpoints/nalaformer_<arch>_official_in1k.pth each names. The authors' NALAFORMER_<S>.pth
# fits this model; they have not released it yet. Once they do: python
# tools/model_converters/convert_checkpoint.py NALAFORMER_<S>.pth
# checkpoints/nalaformer_<arch>_official_in1k.pth --official --arch-check NaLaFormer:<arch>.
# Or pretrain timm's nalaformer_<arch>_official and convert it: python
# tools/model_converters/convert_checkpoint.py model_best.pth.tar
# checkpoints/nalaformer_<arch>_official_in1k.pth (docs/user_guides/weights.md). Without the
# file, tools/train.py stops at the start and says so; from scratch instead: --cfg-options
# model.backbone.init_cfg=None.
_base_ = './semfpn_nalaformer.py'
model = dict(
    backbone=dict(attn_types='official', kernel='relu_split_rope', out_norm=False))
