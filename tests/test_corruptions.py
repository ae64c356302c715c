"""LIBERO-Plus's released sensor-noise corruptions (assay.sim.corruptions) on constructed frames."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from assay.errors import UnsupportedError
from assay.sim.corruptions import corrupt, family, plasma, runnable


def frame(size: int = 64) -> np.ndarray:
    rng = np.random.default_rng(0)
    image = np.zeros((size, size, 3), dtype=np.uint8)
    image[size // 4: 3 * size // 4, size // 4: 3 * size // 4] = 200  # a bright square: edges to blur
    return np.clip(image + rng.integers(0, 20, image.shape), 0, 255).astype(np.uint8)


def test_upstream_indices_name_a_corruption_and_a_severity():
    assert [family(i) for i in (1, 10, 11, 20, 21, 31, 41, 50)] == [
        ("motion blur", 1), ("motion blur", 10), ("gaussian blur", 1), ("gaussian blur", 10), ("zoom blur", 1),
        ("fog", 1), ("glass blur", 1), ("glass blur", 10)]
    assert runnable(5).startswith("motion blur needs ImageMagick") and runnable(13) is None
    with pytest.raises(UnsupportedError, match=r"^LIBERO-Plus noise 3: motion blur needs ImageMagick"):
        corrupt(frame(), 3, np.random.default_rng(0))
    with pytest.raises(UnsupportedError, match=r"^LIBERO-Plus noise index 51 is not valid; valid: 1-50$"):
        family(51)


def test_gaussian_blur_is_a_per_channel_gaussian_truncated_to_uint8():
    image = frame()
    blurred = corrupt(image, 13, np.random.default_rng(0))  # severity 3: sigma 3
    expected = ndimage.gaussian_filter(image / 255.0, sigma=(3, 3, 0), mode="nearest", truncate=4.0)
    assert np.array_equal(blurred, (np.clip(expected, 0, 1) * 255).astype(np.uint8))
    assert blurred.std() < image.std()  # blurred


def test_each_family_changes_the_frame_deterministically_per_generator():
    image = frame()
    for index in (15, 25, 35, 45):
        first = corrupt(image, index, np.random.default_rng(7))
        assert first.shape == image.shape and first.dtype == np.uint8
        assert not np.array_equal(first, image), index
        assert np.array_equal(first, corrupt(image, index, np.random.default_rng(7))), index
    # fog and glass blur draw from the generator; gaussian and zoom blur do not
    def twice(index: int) -> tuple[np.ndarray, np.ndarray]:
        return corrupt(image, index, np.random.default_rng(1)), corrupt(image, index, np.random.default_rng(2))

    assert not np.array_equal(*twice(35)) and np.array_equal(*twice(25))
    fractal = plasma(256, 2.0, np.random.default_rng(0))
    assert fractal.shape == (256, 256) and fractal.min() == 0.0 and fractal.max() == 1.0
