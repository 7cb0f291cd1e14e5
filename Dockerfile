# RL Studio in a CUDA-capable container: the web studio on 0.0.0.0:7860, login required.
#
#   docker build -t rl-studio .
#   docker run --gpus all -p 7860:7860 -e RL_STUDIO_AUTH=alice:change-me \
#              -v "$PWD/runs:/data/runs" rl-studio
#
# The base image brings Python, PyTorch and the CUDA runtime; without a GPU (or without
# --gpus) the same image trains on the CPU. Runs are written to the /data/runs volume.
#
# BASE_IMAGE swaps the base for any image whose `python` / `pip` (first on PATH) already has
# PyTorch, e.g. a CPU-only one built locally: `.ci/container` bootstraps Debian with the CPU
# torch wheel and builds this file with --build-arg BASE_IMAGE=localhost/rl-studio-base:...
ARG BASE_IMAGE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    GRADIO_ANALYTICS_ENABLED=False \
    HF_HUB_OFFLINE=1 \
    SDL_VIDEODRIVER=dummy \
    SDL_AUDIODRIVER=dummy \
    PYGAME_HIDE_SUPPORT_PROMPT=1

WORKDIR /app

# Runtime dependencies only: torch comes with the base image (a pip torch would replace its
# CUDA build), and the test tools (pytest, playwright) are not needed to serve the studio.
COPY requirements.txt ./
RUN python -c "import torch" || { echo "BASE_IMAGE must bring python with torch installed" >&2; exit 1; } \
 && grep -vE '^(torch|pytest|pytest-timeout|playwright)([<>=! ]|$)' requirements.txt > /tmp/runtime-requirements.txt \
 && pip install -r /tmp/runtime-requirements.txt \
 && rm /tmp/runtime-requirements.txt

COPY app.py ./
COPY envs/ envs/
COPY trainer/ trainer/
COPY studio/ studio/
COPY configs/ configs/
COPY assets/ assets/

RUN useradd --create-home --uid 1000 studio \
 && mkdir -p /data/runs \
 && chown -R studio /data/runs
USER studio
VOLUME ["/data/runs"]
EXPOSE 7860

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/', timeout=4)" || exit 1

# The studio listens on all interfaces here, so it refuses to start without a login:
# RL_STUDIO_AUTH=user:password (read by app.py). Set RL_STUDIO_NO_AUTH=1 to run open anyway.
CMD ["sh", "-c", "if [ -z \"$RL_STUDIO_AUTH\" ] && [ \"$RL_STUDIO_NO_AUTH\" != 1 ]; then echo 'Set RL_STUDIO_AUTH=user:password (docker run -e RL_STUDIO_AUTH=...) to log in to the studio, or RL_STUDIO_NO_AUTH=1 to run it without a login.' >&2; exit 2; fi; exec python app.py --host 0.0.0.0 --port 7860 --runs-dir /data/runs"]
