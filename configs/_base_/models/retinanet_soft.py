# RetinaNet on a SOFT++ backbone; a config sets its arch (see docs/usage.md).
# Landmarks: the paper's rule, m = tokens / r^2 per stage (m ~ 1 040 in stage 1 at 1333x800),
# so the Newton-Schulz pseudo-inverse (Eq. 10) costs about 40 m^3 flops per head and layer and
# dominates at detection sizes (logged once when m > 256). backbone.pinv='cholesky' applies the
# same A^+ (up to a tiny ridge) at m^3 / 3 flops; backbone.max_landmarks=49 pools the landmarks
# (linear cost, not the paper's rule).
_base_ = './retinanet.py'
model = dict(backbone=dict(type='mmlinattn.SOFT'))
