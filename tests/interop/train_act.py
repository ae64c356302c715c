"""Run in the interop environment (make test-interop): train lerobot's ACT on our export, save it, print JSON.

    python train_act.py EXPORT_DIR OUT_DIR STEPS

lerobot's own factory sizes ACT from the export's features and stats (no weights are fetched: the ResNet
backbone starts untrained); ``STEPS`` Adam steps on chunks of future actions (lerobot's delta timestamps);
then ``save_pretrained`` writes the policy directory with its pre/post-processors beside it, which is what
Assay's ``lerobot:PATH`` policy loads. Seeded: the same export and steps give the same weights.
"""

import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402
from lerobot.policies.act.configuration_act import ACTConfig  # noqa: E402
from lerobot.policies.factory import make_policy, make_pre_post_processors  # noqa: E402

export, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
meta = LeRobotDataset("assay/export", root=export).meta
config = ACTConfig(device="cpu", pretrained_backbone_weights=None, chunk_size=8, n_action_steps=8, dim_model=64,
                   n_heads=4, dim_feedforward=128, n_encoder_layers=1, n_vae_encoder_layers=1, latent_dim=8)
policy = make_policy(config, ds_meta=meta)
preprocess, postprocess = make_pre_post_processors(config, dataset_stats=meta.stats)
training = LeRobotDataset("assay/export", root=export,
                          delta_timestamps={"action": [i / meta.fps for i in range(config.chunk_size)]})
loader = torch.utils.data.DataLoader(training, batch_size=8, shuffle=True,
                                     generator=torch.Generator().manual_seed(0), drop_last=True)
optimiser = torch.optim.AdamW(policy.parameters(), lr=1e-3)
policy.train()
losses: list[float] = []
while len(losses) < steps:
    for batch in loader:
        loss, _ = policy.forward(preprocess(batch))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(float(loss))
        if len(losses) == steps:
            break
policy.eval()
policy.save_pretrained(out)
preprocess.save_pretrained(out)
postprocess.save_pretrained(out)
json.dump({"steps": len(losses), "first_loss": losses[0], "last_loss": sum(losses[-10:]) / min(10, len(losses)),
           "files": sorted(os.listdir(out))}, sys.stdout)
