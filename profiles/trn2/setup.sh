#!/usr/bin/env bash
# The trn2 install profile: titanflow on top of the walkthrough's stack ("Train Qwen3 on AWS Trainium
# with torchtitan") on one trn2.48xlarge started from the Neuron 2.33 DLAMI "Deep Learning AMI Neuron
# torch-neuronx 2.14.0" (Ubuntu 24.04), in that DLAMI's own venv, replacing none of the stack.
#
#   make setup-trn2              # from the repository root, on the node
#   make setup-trn2 PRINT=1      # print the commands instead (docs/install.md, "On a trn2 node", shows them)
#   make setup-trn2 SCENARIOS=moe    # doctor checks the node for moe's runs (its weights), not native's
#
# Every pip install runs under `-c profiles/trn2/constraints.txt` (torch 2.14.0, torch-neuronx 2.14.3,
# transformers 5.16.0), so none of them can move the stack; `pip check` and `titanflow doctor` close.
# Sources: Neuron 2.33 docs, setup/pytorch/update-dlami (the DLAMI's venv and the two indexes),
# release-notes/components/torchneuron (torch-neuronx 2.14.3.0 is for torch 2.14.0, Python 3.12-3.14),
# training/torchtitan/get-started/setup-torchtitan-neuron (the fork: requirements.txt, then -e .).
set -euo pipefail
cd "$(dirname "$0")/../.."

# The knobs. Override the first two from the environment for another venv or checkout folder.
VENV=${TITANFLOW_TRN2_VENV:-/opt/aws_neuronx_venv_torch_neuronx_2_14_0}
FORK_DIR=${TITANFLOW_TRN2_FORK_DIR:-$HOME/torchtitan-neuron}
PROFILE=profiles/trn2
PYTHON_VERSION=$(<"$PROFILE/.python-version")    # the walkthrough's Python, 3.12 (titanflow doctor reads it too)
NEURON_INDEX=https://pip.repos.neuron.amazonaws.com
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
FORK_REPO=https://github.com/aws-neuron/torchtitan-neuron.git
FORK_REF=release-2.33                            # the walkthrough's branch of the fork

PRINT=
SCENARIOS=()   # --scenario <name>, once per scenario the node is to run: doctor checks each one's run (its weights)
while (($#)); do
    case $1 in
        --print) PRINT=1 ;;
        --scenario) SCENARIOS+=("${2:?--scenario needs a scenario name (a key of SCENARIOS, titan_cfg/scenarios.py)}"); shift ;;
        *) echo "setup.sh: unknown argument $1; pass --print and --scenario <name> (make setup-trn2 PRINT=1 SCENARIOS=moe)" >&2
           exit 2 ;;
    esac
    shift
done
PY=$VENV/bin/python

# Print a command (copy-pastable: arguments with shell characters single-quoted), then run it unless --print.
run() {
    local out=() arg
    for arg in "$@"; do
        if [[ $arg =~ ^[A-Za-z0-9_./:=@+,-]+$ ]]; then out+=("$arg"); else out+=("'${arg//\'/\'\\\'\'}'"); fi
    done
    echo "${out[*]}"
    [[ -n $PRINT ]] || "$@"
}

# 1. The DLAMI's venv runs the walkthrough's Python.
run "$PY" -c "import sys; sys.exit(sys.version_info[:2] != (${PYTHON_VERSION/./, }) and f\"Python {sys.version.split()[0]} in $VENV; the trn2 profile needs $PYTHON_VERSION\")"
# 2. TorchNeuron, the compiler (which ships nkilib) and NKI: the DLAMI's own update command, held to
#    the walkthrough's pins, so nothing changes on a DLAMI that has them.
run "$PY" -m pip install -c "$PROFILE/constraints.txt" "torch-neuronx==2.14.3.*" "neuronx-cc==2.*" nki \
    --extra-index-url "$NEURON_INDEX" --extra-index-url "$TORCH_CPU_INDEX"
# 3. The torchtitan-neuron fork at the walkthrough's branch, installed as the package `torchtitan`.
if [[ -d $FORK_DIR/.git ]]; then
    run git -C "$FORK_DIR" fetch origin "$FORK_REF"
    run git -C "$FORK_DIR" checkout --detach FETCH_HEAD
else
    run git clone --branch "$FORK_REF" "$FORK_REPO" "$FORK_DIR"
fi
run "$PY" -m pip install -c "$PROFILE/constraints.txt" -r "$FORK_DIR/requirements.txt" \
    --extra-index-url "$NEURON_INDEX" --extra-index-url "$TORCH_CPU_INDEX"
run "$PY" -m pip install -c "$PROFILE/constraints.txt" -e "$FORK_DIR"
# 4. titanflow and what the node lacks from PyPI (the walkthrough's transformers among them).
run "$PY" -m pip install -c "$PROFILE/constraints.txt" -r "$PROFILE/requirements.txt" -e .
# 5. Nothing installed contradicts anything else, then every check of the node (versions, the fork, the names
#    titanflow takes from it, devices, LNC, the kernel, weights, data, cache, disk) with its fix: for each scenario
#    asked for, the run of that scenario (its weights: titan_cfg.scenarios.ON_NODE), else doctor's default, native.
# pip check lists every conflict of the venv; the Neuron DLAMI's venv may carry some of its own, which are not this
# script's to fix: it stops only on those that name a package it installed (the constraints' and requirements' names,
# torch-neuronx, neuronx-cc, nki, the fork, titanflow) and lists the others.
if [[ -z $PRINT ]]; then
    ours=$(sed -e 's/#.*//' -e 's/[<>=!~ ;\[].*//' "$PROFILE/constraints.txt" "$PROFILE/requirements.txt" | grep -v '^$' \
        | tr 'A-Z_' 'a-z-'; printf '%s\n' torch-neuronx neuronx-cc nki torchtitan torchtitan-neuron titanflow)
    conflicts=$("$PY" -m pip check 2>&1 || true)
    [[ $conflicts == "No broken requirements found." ]] && conflicts=""
    mine=$(printf '%s\n' "$conflicts" | awk 'NF' | while read -r line; do
        for name in $ours; do [[ $(tr 'A-Z_' 'a-z-' <<<"$line") =~ (^|[^a-z0-9-])$name([^a-z0-9-]|$) ]] && { echo "$line"; break; }; done
    done)
    others=$(printf '%s\n' "$conflicts" | grep -vxF -f <(printf '%s\n' "$mine") | awk 'NF' || true)
    [[ -n $others ]] && printf 'setup.sh: conflicts already in this venv, left as they are:\n%s\n' "$others" >&2
    if [[ -n $mine ]]; then
        printf 'setup.sh: conflicts with what this script installed:\n%s\n' "$mine" >&2
        exit 1
    fi
else
    run "$PY" -m pip check
fi
if ((${#SCENARIOS[@]} == 0)); then
    run "$VENV/bin/titanflow" doctor --target trn2
else
    failed=0
    for scenario in "${SCENARIOS[@]}"; do  # every scenario's lines, then the exit
        run "$VENV/bin/titanflow" doctor --target trn2 --scenario "$scenario" || failed=1
    done
    exit $failed
fi
