"""LIBERO-Plus's released sensor-noise corruptions, by their upstream index (``libero_plus.corruption``).

LIBERO-Plus's "Sensor Noise" variants (``…_noise_N`` in its ``task_classification.json``) corrupt the **agent
view only**, every observation, with one of five ImageNet-C-style corruptions at severity 1-10 (its
``envs/env_wrapper.py`` @ 4976dc3): N = 1-10 motion blur, 11-20 Gaussian blur, 21-30 zoom blur, 31-40 fog,
41-50 glass blur. This is not Assay's procedural ``libero_plus.noise`` (Gaussian pixel noise of 4/255 x level on
every camera), and the two are the ``noise`` knob of a protocol (``assay protocol diff``).

This module implements them from their published definitions and upstream's severity tables (no upstream code
is copied; the tables are the parameters):

* Gaussian blur: a Gaussian of sigma = severity per channel (edge pixels repeated, truncated at 4 sigma);
* zoom blur: the mean of the frame and its centre crops zoomed back by each factor of upstream's range
  (bilinear), clipped;
* fog: a diamond-square plasma fractal (wibble decay from the table) added at the table's strength, rescaled by
  the frame's maximum;
* glass blur: a Gaussian blur, local pixel displacements in upstream's order (each pixel takes the value of a
  neighbour drawn within ``max_delta``: upstream's swap through NumPy views copies rather than swaps, and this
  does what it does), then a second Gaussian blur.

Each result is truncated to uint8 as upstream's ``astype(np.uint8)`` does. Randomness (fog's fractal, glass
blur's displacements) comes from the generator passed in (Assay seeds it from the episode seed and step;
upstream draws from NumPy's global generator, unseeded). Motion blur (1-10) needs ImageMagick's motion blur
(upstream calls it through Wand) and is refused in one line. Upstream's fog fails on NumPy 2 (its fractal
allocates ``np.float_``, removed in NumPy 2.0), so its own numbers for fog come from NumPy 1.
"""

from __future__ import annotations

import math

import numpy as np

from assay.errors import UnsupportedError

MAX_INDEX = 50
ZOOM_RANGES = ((1.11, 0.01), (1.16, 0.01), (1.21, 0.02), (1.26, 0.02), (1.31, 0.03),
               (1.36, 0.01), (1.41, 0.01), (1.46, 0.02), (1.51, 0.02), (1.56, 0.03))  # np.arange(1, stop, step)
FOG = ((0.5, 3.0), (1.0, 2.8), (1.5, 2.5), (2.0, 2.2), (2.5, 2.0), (3.0, 1.8), (3.5, 1.6), (4.0, 1.5), (4.5, 1.4),
       (5.0, 1.3))  # (strength, wibble decay)
GLASS = ((0.5, 1, 3), (0.7, 1, 3), (0.9, 2, 3), (1.0, 2, 2), (1.1, 3, 2), (1.3, 3, 2), (1.5, 4, 2), (1.8, 4, 2),
         (2.2, 5, 1), (2.5, 5, 1))  # (sigma, max delta, iterations)
FAMILIES = ("motion blur", "gaussian blur", "zoom blur", "fog", "glass blur")
FRACTAL_SIZE = 256


def family(index: int) -> tuple[str, int]:
    """(corruption, severity 1-10) of upstream's noise index 1-50."""
    if not 1 <= index <= MAX_INDEX:
        raise UnsupportedError(f"LIBERO-Plus noise index {index} is not valid; valid: 1-{MAX_INDEX}")
    return FAMILIES[(index - 1) // 10], (index - 1) % 10 + 1


def runnable(index: int) -> str | None:
    """Why upstream's noise ``index`` cannot run here (None when it can)."""
    name, _ = family(index)
    if name == "motion blur":
        return "motion blur needs ImageMagick's MotionBlurImage (upstream calls it through Wand), not installed here"
    return None


def corrupt(frame: np.ndarray, index: int, rng: np.random.Generator) -> np.ndarray:
    """``frame`` (H, W, 3 uint8) under upstream's noise ``index``; UnsupportedError for motion blur."""
    why = runnable(index)
    if why is not None:
        raise UnsupportedError(f"LIBERO-Plus noise {index}: {why}")
    name, severity = family(index)
    image = frame.astype(np.float64) / 255.0
    if name == "gaussian blur":
        out = _blur(image, float(severity))
    elif name == "zoom blur":
        out = _zoom_blur(image.astype(np.float32), severity)
    elif name == "fog":
        out = _fog(image, severity, rng)
    else:
        out = _glass(frame, severity, rng)
    return (np.clip(out, 0.0, 1.0) * 255.0).astype(np.uint8)


def _blur(image: np.ndarray, sigma: float) -> np.ndarray:
    from scipy import ndimage  # here: listing tasks imports this module and must not load SciPy

    return np.asarray(ndimage.gaussian_filter(image, sigma=(sigma, sigma, 0.0), mode="nearest", truncate=4.0))


def _zoom(image: np.ndarray, factor: float) -> np.ndarray:
    """The centre crop of ``image`` zoomed by ``factor`` back to its size (bilinear)."""
    from scipy import ndimage

    size = image.shape[0]
    crop = int(math.ceil(size / factor))
    top = (size - crop) // 2
    zoomed = ndimage.zoom(image[top:top + crop, top:top + crop], (factor, factor, 1), order=1)
    trim = (zoomed.shape[0] - size) // 2
    return np.asarray(zoomed[trim:trim + size, trim:trim + size])


def _zoom_blur(image: np.ndarray, severity: int) -> np.ndarray:
    stop, step = ZOOM_RANGES[severity - 1]
    factors = np.arange(1.0, stop, step)
    total = np.zeros_like(image)
    for factor in factors:
        total += _zoom(image, float(factor))
    return (image + total) / (len(factors) + 1)


def plasma(size: int, decay: float, rng: np.random.Generator) -> np.ndarray:
    """A (size, size) diamond-square fractal in [0, 1] (size a power of two)."""
    grid = np.zeros((size, size))
    step, wibble = size, 100.0
    while step >= 2:
        half = step // 2
        corners = grid[0:size:step, 0:size:step]
        square = corners + np.roll(corners, -1, axis=0)
        square += np.roll(square, -1, axis=1)
        grid[half:size:step, half:size:step] = square / 4 + wibble * rng.uniform(-wibble, wibble, square.shape)
        centres = grid[half:size:step, half:size:step]
        corners = grid[0:size:step, 0:size:step]
        rows = centres + np.roll(centres, 1, axis=0) + corners + np.roll(corners, -1, axis=1)
        grid[0:size:step, half:size:step] = rows / 4 + wibble * rng.uniform(-wibble, wibble, rows.shape)
        cols = centres + np.roll(centres, 1, axis=1) + corners + np.roll(corners, -1, axis=0)
        grid[half:size:step, 0:size:step] = cols / 4 + wibble * rng.uniform(-wibble, wibble, cols.shape)
        step //= 2
        wibble /= decay
    grid -= grid.min()
    return grid / grid.max()


def _fog(image: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    strength, decay = FOG[severity - 1]
    height, width = image.shape[:2]
    size = max(FRACTAL_SIZE, 1 << (max(height, width) - 1).bit_length())
    peak = image.max()
    fogged = image + strength * plasma(size, decay, rng)[:height, :width, None]
    return np.asarray(fogged * peak / (peak + strength))


def _glass(frame: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    sigma, delta, iterations = GLASS[severity - 1]
    pixels = (np.clip(_blur(frame.astype(np.float64) / 255.0, sigma), 0.0, 1.0) * 255.0).astype(np.uint8)
    height, width = pixels.shape[:2]
    rows, cols = range(height - delta, delta, -1), range(width - delta, delta, -1)
    for _ in range(iterations):
        offsets = rng.integers(-delta, delta, size=(len(rows) * len(cols), 2))
        drawn = iter(offsets.tolist())
        for h in rows:
            for w in cols:
                dx, dy = next(drawn)
                pixels[h, w] = pixels[h + dy, w + dx]
    return _blur(pixels.astype(np.float64) / 255.0, sigma)
