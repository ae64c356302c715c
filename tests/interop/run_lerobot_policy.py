"""Run in the interop environment (make test-interop): build the real lerobot ACT policy from our export, print JSON.

lerobot's own factory sizes the policy from the dataset's features and stats (no weights are fetched:
the ResNet backbone starts untrained); a training step (forward + backward) on a batch of exported
frames, then ``select_action`` through lerobot's pre/post-processors on one frame, twice from the same
torch seed.
"""

import json
import os
import sys
from importlib.metadata import version

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402
from lerobot.policies.act.configuration_act import ACTConfig  # noqa: E402
from lerobot.policies.factory import make_policy, make_pre_post_processors  # noqa: E402

dataset = LeRobotDataset("assay/export", root=sys.argv[1])
config = ACTConfig(device="cpu", pretrained_backbone_weights=None, chunk_size=8, n_action_steps=8, dim_model=64,
                   n_heads=4, dim_feedforward=128, n_encoder_layers=1, n_vae_encoder_layers=1, latent_dim=8)
torch.manual_seed(0)
policy = make_policy(config, ds_meta=dataset.meta)
preprocess, postprocess = make_pre_post_processors(config, dataset_stats=dataset.meta.stats)

# Training: ACT wants a chunk of future actions per frame (lerobot's delta timestamps give it the padding mask).
training = LeRobotDataset("assay/export", root=sys.argv[1],
                          delta_timestamps={"action": [i / dataset.fps for i in range(config.chunk_size)]})
loader = torch.utils.data.DataLoader(training, batch_size=4, shuffle=False)
batch = preprocess(next(iter(loader)))
policy.train()
loss, _ = policy.forward(batch)
loss.backward()
gradients = sum(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in policy.parameters())

policy.eval()
actions = []
for _ in range(2):
    torch.manual_seed(1)
    policy.reset()
    frame = {key: value.unsqueeze(0) if isinstance(value, torch.Tensor) else [value]
             for key, value in dataset[0].items()}
    with torch.no_grad():
        actions.append(postprocess(policy.select_action(preprocess(frame))).squeeze(0).tolist())
json.dump({
    "policy": type(policy).__name__, "torch": torch.__version__, "loss": float(loss),
    "parameters_with_gradients": gradients, "action_dim": config.output_features["action"].shape[0],
    "actions": actions, "image_features": sorted(config.image_features), "lerobot": version("lerobot"),
}, sys.stdout)
