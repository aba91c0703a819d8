"""Reading attention-map figures back from their PNG files: the image panels (found as
non-white rectangles), and the heat map under an overlay recovered from its colours."""
import numpy as np


def read_rgb(path) -> np.ndarray:
    from PIL import Image
    with Image.open(path) as png:
        return np.asarray(png.convert('RGB')).astype(float)


def _runs(flags: np.ndarray, min_len: int):
    """(start, stop) of the runs of True at least ``min_len`` long."""
    edges = np.flatnonzero(np.diff(np.r_[0, flags.astype(int), 0]))
    return [(a, b) for a, b in zip(edges[::2], edges[1::2]) if b - a >= min_len]


def panels(rgb: np.ndarray, min_side: int = 30):
    """(y0, y1, x0, x1) of the filled rectangles of a figure (image panels, colour bars),
    row by row, left to right."""
    filled = (rgb < 250).any(-1)
    found = []
    for y0, y1 in _runs(filled.mean(1) > 0.15, min_side):
        band = filled[y0:y1]
        for x0, x1 in _runs(band.mean(0) > 0.9, 8):
            ys = _runs(filled[:, x0:x1].mean(1) > 0.9, min_side)
            for a, b in ys:
                if a < y1 and b > y0 and (a, b, x0, x1) not in found:
                    found.append((a, b, x0, x1))
    return found


def viridis_lut(n: int = 256) -> np.ndarray:
    from matplotlib import colormaps
    return colormaps['viridis'](np.linspace(0, 1, n))[:, :3] * 255


def heat_under_overlay(overlay: np.ndarray, image: np.ndarray, alpha: float):
    """The colour-map values (0..1) and the distance of each recovered colour to viridis, for
    pixels drawn as ``alpha * viridis(value) + (1 - alpha) * image`` (an image panel may be
    a pixel larger than the overlay: both are cut to the common size)."""
    if image.ndim == 3:
        h, w = min(overlay.shape[0], image.shape[0]), min(overlay.shape[1], image.shape[1])
        overlay, image = overlay[:h, :w], image[:h, :w]
    colour = (overlay - (1 - alpha) * image) / alpha
    lut = viridis_lut()
    # squared distances to every colour of the map as one product (|c|^2 - 2 c.l + |l|^2),
    # not a (pixels, 256, 3) difference tensor: a 300 x 300 panel made 550 MB of those
    c = colour.reshape(-1, 3)
    squared = (c * c).sum(1, keepdims=True) - 2 * c @ lut.T + (lut * lut).sum(1)
    nearest = squared.argmin(1)
    dist = np.sqrt(np.maximum(squared[np.arange(len(c)), nearest], 0))
    return (nearest / (len(lut) - 1)).reshape(overlay.shape[:2]), \
        dist.reshape(overlay.shape[:2])
