"""Write the protocol manifests shipped with Assay (``src/assay/spec/protocols/*.json``).

Each manifest is a published harness's evaluation written down as data (``assay.spec.protocol``): the values
below were read in the files cited in each manifest's ``sources`` (through the search tool's mirrors of the
repositories, at the commits named); the task lists come from Assay's LIBERO catalogue
(``src/assay/spec/libero_tasks.json``). The script fills in each manifest's hash; a test keeps the shipped
hashes golden, so a change here that changes what is run must bump the manifest's ``version``.

    python benchmarks/protocol_manifests.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from assay.spec.libero_catalog import SUITES, libero_catalog
from assay.spec.protocol import parse_manifest

OUT = Path(__file__).resolve().parents[1] / "src" / "assay" / "spec" / "protocols"
FOUR = ("spatial", "object", "goal", "10")
OPENPI = "github.com/Physical-Intelligence/openpi examples/libero/main.py @ 15a9616a0094"
OFT = "github.com/moojink/openvla-oft experiments/robot/libero/run_libero_eval.py @ 213c5ff8d6e9"
LEROBOT_044 = "github.com/huggingface/lerobot @ v0.4.4"
LEROBOT_MAIN = "github.com/huggingface/lerobot @ 7427f31801f9"
PRO_README = "github.com/Zxy-MLlab/LIBERO-PRO README.md @ 2b910b5b5f53"
PRO_HARNESS = "github.com/Zxy-MLlab/LIBERO-PRO libero/evaluation @ 8af465d0484b"
PRO_KINDS = {"object": "libero.object", "swap": "libero.swap", "language": "libero.language", "task": "libero.task",
             "environment": "libero.environment"}
PRO_LABELS = {"object": "Obj", "swap": "Pos", "language": "Sem", "task": "Task", "environment": "Env"}


def suites(horizons: dict[str, int]) -> list[dict[str, Any]]:
    """The four standard suites with their task ids (catalogue order) and these horizons."""
    catalog = libero_catalog()
    return [{"name": short, "horizon": horizons[short],
             "tasks": [f"libero/{short}/{entry['task']}@2" for entry in catalog[SUITES[short].benchmark]]}
            for short in FOUR]


def libero_knobs(**values: Any) -> dict[str, Any]:
    """The knobs every LIBERO harness here shares (fixed initial states from 0, 10 settle steps, 20 Hz), with
    these values."""
    return {"seed": 0, "settle_steps": 10, "success": "any_step", "renderer": "benchmark", "control_hz": 20.0,
            **values}


OPENPI_HORIZONS = {"spatial": 220, "object": 280, "goal": 300, "10": 520}
LEROBOT_HORIZONS = {"spatial": 280, "object": 280, "goal": 300, "10": 520}
CAMERAS = ["agentview", "wrist"]


def openpi() -> dict[str, Any]:
    return {
        "name": "openpi-libero", "version": 1, "backend": "libero",
        "title": "openpi's LIBERO evaluation (examples/libero/main.py), the four suites",
        "suites": suites(OPENPI_HORIZONS),
        "knobs": libero_knobs(
            trials_per_task=50, replan_steps=5, prompt="task",
            image={"cameras": CAMERAS, "render": [256, 256], "policy_input": [224, 224], "resize": "resize_with_pad"}),
        "sources": {
            "suites": f"{OPENPI}: task_suite_name libero_spatial|libero_object|libero_goal|libero_10 (README results "
                      "table: these four)",
            "horizon": f"{OPENPI}: max_steps 220 / 280 / 300 / 520, policy steps after num_steps_wait",
            "trials_per_task": f"{OPENPI}: num_trials_per_task = 50",
            "seed": f"{OPENPI}: initial_states[episode_idx], episode_idx from 0",
            "settle_steps": f"{OPENPI}: num_steps_wait = 10 (dummy action [0]*6 + [-1])",
            "image": f"{OPENPI}: LIBERO_ENV_RESOLUTION = 256, both images turned 180 degrees, then "
                     "image_tools.resize_with_pad(img, 224, 224) in the client",
            "replan_steps": f"{OPENPI}: replan_steps = 5",
            "prompt": f"{OPENPI}: prompt = str(task_description) = task.language (from the BDDL file name)",
            "control_hz": "LIBERO env_wrapper.py: ControlEnv(control_freq=20); the script does not set it",
        },
        "not_reproduced": [
            "openpi seeds NumPy and the environment with 7 (args.seed); only the fixture placement LIBERO's reset "
            "draws before the initial state is restored uses it; Assay draws it from the episode seed",
            "an exception inside an episode is caught, logged and counted as a failure by openpi; Assay records "
            "the episode as error and leaves it out of the rate (the stamp then says diagnostic)",
            "the resize to 224 px happens in Assay's remote-policy client (params image_size); a local policy "
            "receives the 256 px frames, and the stamp says so",
        ],
    }


def lerobot(release: str) -> dict[str, Any]:
    main = release == "main"
    where = LEROBOT_MAIN if main else LEROBOT_044
    size = 360 if main else 256
    return {
        "name": f"lerobot-libero-{release}", "version": 1, "backend": "libero",
        "title": f"LeRobot's lerobot-eval on LIBERO ({'its main branch' if main else 'release 0.4.4'}), the four "
                 "suites as its documented reproduction command runs them",
        "suites": suites(LEROBOT_HORIZONS),
        "knobs": libero_knobs(
            trials_per_task=10, replan_steps=10, prompt="task",
            image={"cameras": ["image", "image2"], "render": [size, size], "policy_input": [size, size],
                   "resize": "policy"}),
        "sources": {
            "suites": f"{where} docs/source/libero.mdx: --env.task=libero_spatial,libero_object,libero_goal,libero_10",
            "horizon": f"{where} src/lerobot/envs/libero.py: TASK_SUITE_MAX_STEPS 280 / 280 / 300 / 520",
            "trials_per_task": f"{where} docs/source/libero.mdx: --eval.n_episodes=10 (per task: "
                               "src/lerobot/scripts/lerobot_eval.py runs n_episodes on each task's env)",
            "seed": f"{where} src/lerobot/envs/libero.py: init_state_id = episode_index (batch_size 1)",
            "settle_steps": f"{where} src/lerobot/envs/libero.py: LiberoEnv(num_steps_wait=10)",
            "image": (f"{where} src/lerobot/envs/configs.py: gym_kwargs passes observation_height/width = 360"
                      if main else f"{where} src/lerobot/envs/configs.py: LiberoEnv.gym_kwargs carries no image size, "
                      "so libero.py's default observation_height = observation_width = 256 renders (the config's "
                      "360 only declares the features)") + "; cameras agentview_image, robot0_eye_in_hand_image as "
                      "image, image2; LiberoProcessorStep turns both 180 degrees; the policy's processor resizes",
            "replan_steps": f"{where} docs/source/libero.mdx: --policy.n_action_steps=10 (a policy setting)",
            "prompt": f"{where} src/lerobot/envs/libero.py: task_description = task.language",
            "control_hz": f"{where} src/lerobot/envs/libero.py passes no control_freq: robosuite's 20 Hz",
        },
        "notes": ["LeRobot 0.4.4 and main differ, for this protocol, only in the image size (256 vs 360 px); "
                  "the configs' fps (30 in 0.4.4, 20 on main) is not passed to the simulator"],
        "not_reproduced": [
            "with --eval.batch_size B > 1, sub-environment i starts from states i, i + B, ...; the states used are "
            "the same set 0..n-1 when n is a multiple of B, which Assay assumes",
        ],
    }


def openvla_oft() -> dict[str, Any]:
    return {
        "name": "openvla-oft-libero", "version": 1, "backend": "libero",
        "title": "OpenVLA-OFT's LIBERO evaluation (run_libero_eval.py), the four suites",
        "suites": suites(OPENPI_HORIZONS),
        "knobs": libero_knobs(
            trials_per_task=50, replan_steps=8, prompt="task",
            image={"cameras": CAMERAS, "render": [256, 256], "policy_input": [256, 256], "resize": "policy"}),
        "sources": {
            "horizon": f"{OFT}: TASK_MAX_STEPS 220 / 280 / 300 / 520",
            "trials_per_task": f"{OFT}: num_trials_per_task = 50",
            "seed": f"{OFT}: initial_states_path = 'DEFAULT', initial_states[episode_idx]",
            "settle_steps": f"{OFT}: num_steps_wait = 10",
            "image": f"{OFT}: env_img_res = 256; the script resizes for the model (224, center crop 0.9)",
            "replan_steps": f"{OFT}: num_open_loop_steps = 8 (NUM_ACTIONS_CHUNK)",
            "prompt": f"{OFT}: task_description = task.language",
        },
        "not_reproduced": [
            "OFT's script prepares images itself (JPEG round trip, resize to 224, center crop 0.9 for its "
            "checkpoints); Assay sends the 256 px frames and leaves that preprocessing to the policy",
            "the script seeds NumPy and torch with 7 (set_seed_everywhere); Assay draws fixture placement from the "
            "episode seed",
        ],
    }


def pro_variants() -> list[dict[str, Any]]:
    """Nominal (the original suites) and each of LIBERO-PRO's five perturbations alone, on the tasks upstream's
    package can perturb that way (the environment perturbation: not the five LIBERO-10 tasks on the living-room
    table already)."""
    catalog = libero_catalog()
    entries: list[dict[str, Any]] = [{"label": "original", "factors": {}, "category": "original"}]
    for kind, factor in PRO_KINDS.items():
        variant: dict[str, Any] = {"label": kind, "factors": {factor: "pro"}, "category": PRO_LABELS[kind]}
        if kind == "environment":
            variant["tasks"] = [f"libero/{short}/{e['task']}@2" for short in FOUR
                                for e in catalog[SUITES[short].benchmark]
                                if "environment" in (e.get("generator") or ())]
        entries.append(variant)
    return entries


def libero_pro() -> dict[str, Any]:
    return {
        "name": "libero-pro", "version": 1, "backend": "libero",
        "title": "LIBERO-PRO's published evaluation: OpenVLA-OFT's run_libero_eval.py on the perturbed suites "
                 "<suite>_{object,swap,lan,task,env} of the four suites, as its README adapts it",
        "suites": suites(OPENPI_HORIZONS),
        "knobs": libero_knobs(
            trials_per_task=50, replan_steps=8, prompt="task",
            image={"cameras": CAMERAS, "render": [256, 256], "policy_input": [256, 256], "resize": "policy"}),
        "variants": pro_variants(),
        "sources": {
            "variants": f"{PRO_README}: TaskSuite LIBERO_*_{{LAN,OBJECT,SWAP,TASK,ENV}}; leaderboard columns Obj, Pos, "
                        "Sem, Task, Env per suite; 'task' combines with no other",
            "horizon": f"{PRO_README}: TASK_MAX_STEPS of the perturbed suites = the original suites' (220 / 280 / "
                       "300 / 520)",
            "trials_per_task": f"{OFT}: num_trials_per_task = 50 (the README's script)",
            "prompt": f"{OFT}: task_description = task.language, from the BDDL file *name*, which the perturbed "
                      "suites keep: on <suite>_lan and <suite>_task the script sends the original instruction",
            "replan_steps": f"{OFT}: num_open_loop_steps = 8",
            "image": f"{OFT}: env_img_res = 256, the model's own resize",
        },
        "notes": ["the environment perturbation ships no suite: upstream's perturbation.create_env writes it and "
                  "generate_init_states.py samples its initial states; Assay generates the scene with upstream's "
                  "generator and samples each episode's layout from its seed"],
        "not_reproduced": ["OFT's image preprocessing (JPEG, resize, center crop) is left to the policy",
                           "the environment suite's initial states are sampled per episode seed, not read from a "
                           "file generated once"],
    }


def libero_pro_harness() -> dict[str, Any]:
    return {
        "name": "libero-pro-harness", "version": 1, "backend": "libero",
        "title": "LIBERO-PRO's own evaluator (libero/evaluation, eval.yaml with the pi05 client) on the perturbed "
                 "suites",
        "suites": suites({"spatial": 300, "object": 300, "goal": 300, "10": 300}),
        "knobs": libero_knobs(
            trials_per_task=50, replan_steps=5, prompt="variant",
            image={"cameras": CAMERAS, "render": [256, 256], "policy_input": [224, 224], "resize": "resize_with_pad"}),
        "variants": pro_variants(),
        "sources": {
            "horizon": f"{PRO_HARNESS} configs/eval.yaml: rollout.max_steps = 300 (every suite)",
            "settle_steps": f"{PRO_HARNESS} configs/eval.yaml: rollout.warmup_steps = 10 ([0]*6 + [-1])",
            "replan_steps": f"{PRO_HARNESS} configs/eval.yaml: rollout.execute_horizon = 5",
            "trials_per_task": f"{PRO_HARNESS} README.md: episodes_per_task 1 by default (a smoke test); 50 for a "
                               "full evaluation",
            "seed": f"{PRO_HARNESS} runner.py: init_state_ids [] -> range(episodes_per_task)",
            "image": f"{PRO_HARNESS} configs/eval.yaml camera 256; clients/openpi_client.py: turned 180 degrees, "
                     "resize_with_pad to inference.image_size = 224 (configs/policy/pi05.yaml)",
            "prompt": f"{PRO_HARNESS} runner.py: prompt = env.language_instruction, the BDDL file's :language",
        },
        "not_reproduced": [
            "the evaluator stops an episode after rollout.episode_timeout_seconds = 50 s of wall clock; Assay has "
            "no wall-clock limit per episode in a protocol (a host-dependent outcome)",
            "benchmark.seed = 7 seeds NumPy and the environment; Assay draws fixture placement from the episode seed",
        ],
    }


def libero_plus() -> dict[str, Any]:
    return {
        "name": "libero-plus", "version": 1, "backend": "libero",
        "title": "LIBERO-Plus's released variant set (10,030 variants of the four suites' tasks, each run once) "
                 "under openpi's harness",
        "suites": suites(OPENPI_HORIZONS),
        "knobs": libero_knobs(
            trials_per_task=1, replan_steps=5, prompt="task", noise="upstream",
            image={"cameras": CAMERAS, "render": [256, 256], "policy_input": [224, 224], "resize": "resize_with_pad"}),
        "variants": [],
        "variant_set": {"repository": "github.com/sylvestf/LIBERO-plus", "commit": "4976dc3",
                        "path": "libero/libero/benchmark/task_classification.json",
                        "sha256": "faa87cce3e3ba434da01df7c77523a391b5f2912e4774330b0aa1be5f6a999e6", "count": 10030},
        "sources": {
            "variant_set": "github.com/sylvestf/LIBERO-plus libero/libero/benchmark/task_classification.json @ "
                           "4976dc3: 2402 / 2518 / 2591 / 2519 variants of spatial / object / goal / 10, each with its "
                           "category and difficulty level",
            "trials_per_task": "github.com/sylvestf/LIBERO-plus README.md @ 4976dc3: 'adjusting num_trials_per_task "
                               "from 50 to 1'",
            "prompt": "LIBERO-Plus's benchmark/__init__.py: task.language, read from the BDDL file for a "
                      "language variant",
            "noise": "LIBERO-Plus's envs/env_wrapper.py: noise 1-50 = motion, gaussian, zoom, glass blur and fog at "
                     "severity 1-10, on the agentview frame only",
        },
        "notes": ["Assay ships none of LIBERO-Plus's files (its repository states no license): the variant list is "
                  "read from an upstream checkout (assay run --protocol libero-plus --upstream DIR), checked against "
                  "the pinned SHA-256; what of it can run here is in docs/PROTOCOLS.md"],
        "not_reproduced": ["camera, robot-initial-state, light, background and layout variants need LIBERO-Plus's "
                           "own environment code and assets; motion-blur noise needs ImageMagick"],
    }


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for build in (openpi, lambda: lerobot("0.4.4"), lambda: lerobot("main"), openvla_oft, libero_pro,
                  libero_pro_harness, libero_plus):
        data = build()
        manifest = parse_manifest(data, data["name"])  # validates and fills the hash
        document = {"schema_version": 1, **data, "hash": manifest.content_hash()}
        path = OUT / f"{manifest.name}.v{manifest.version}.json"
        path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{path.name}: {manifest.content_hash()}")


if __name__ == "__main__":
    main()
