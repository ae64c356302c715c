"""Run in the interop environment (make test-interop): a LeRobot LIBERO policy as LeRobot users build one, saved.

    python make_libero_policy.py OUT_DIR

lerobot's own factory (``make_policy``) builds ACT from lerobot's own LIBERO environment config
(``lerobot.envs.configs.LiberoEnv``, 256 px, its action feature) with the inputs LeRobot's LIBERO policies
read after its ``LiberoProcessorStep``: ``observation.images.image`` (the agent view), ``.image2`` (the
wrist), both 3 x 256 x 256, and the 8-d ``observation.state``. The weights are untrained (no download: the
ResNet backbone starts from scratch), seeded; ``save_pretrained`` writes the directory with its
pre/post-processors, which ``assay serve-policy lerobot`` loads unchanged. Prints JSON.
"""

import json
import os
import sys
from importlib.metadata import version

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from lerobot.configs.types import FeatureType, PolicyFeature  # noqa: E402
from lerobot.envs.configs import LiberoEnv  # noqa: E402
from lerobot.policies.act.configuration_act import ACTConfig  # noqa: E402
from lerobot.policies.factory import make_policy, make_pre_post_processors  # noqa: E402

out = sys.argv[1]
torch.manual_seed(0)
size = 256
env = LiberoEnv(task="libero_object", observation_height=size, observation_width=size)
inputs = {
    "observation.images.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, size, size)),
    "observation.images.image2": PolicyFeature(type=FeatureType.VISUAL, shape=(3, size, size)),
    "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(8,)),
}
config = ACTConfig(device="cpu", pretrained_backbone_weights=None, chunk_size=10, n_action_steps=10, dim_model=64,
                   n_heads=4, dim_feedforward=128, n_encoder_layers=1, n_vae_encoder_layers=1, latent_dim=8,
                   input_features=inputs)
policy = make_policy(config, env_cfg=env)
preprocess, postprocess = make_pre_post_processors(config)
policy.save_pretrained(out)
preprocess.save_pretrained(out)
postprocess.save_pretrained(out)
json.dump({
    "policy": type(policy).__name__, "lerobot": version("lerobot"),
    "inputs": {key: list(feature.shape) for key, feature in sorted(config.input_features.items())},
    "outputs": {key: list(feature.shape) for key, feature in sorted(config.output_features.items())},
    "env_features_map": {key: value for key, value in sorted(env.features_map.items()) if key.startswith("pixels")},
    "files": sorted(os.listdir(out)),
}, sys.stdout)
