# miles runtime with the AWS EFA stack, for charts/miles on p5/p5e/p5en (and any EFA instance).
#
# It follows the layout of the AWS miles test case that was run on p5en (awslabs/awsome-distributed-ai,
# 3.test_cases/pytorch/miles): the upstream miles image as it is, plus only the EFA userspace stack.
#   - base: the upstream miles image pinned BY DIGEST. radixark/miles :latest and :dev roll (a cron
#     rebuilds them up to twice a day) and the timestamped dev-<YYYYMMDDHHMM> tags are pruned to the
#     newest 20, so neither is a pin. Release tags (v<version>, first one v0.1.0 of 2026-08-18) are
#     not pruned; still pin the digest you resolved from one.
#   - minimum base: the image must contain /root/miles/miles/utils/external_utils/model_args_utils.py,
#     which the chart runs as `python3 <that file> <profile>`. It came with miles commit fe30593
#     (2026-08-09, the scripts/models/*.sh profiles became *.py), so: v0.1.0 or later, or a dev build
#     made after that commit. The build checks it and stops otherwise.
#   - the EFA installer with the aws-ofi-nccl plugin it bundles (nothing is compiled here: the
#     plugin's own sources before 1.17.0 do not build against CUDA 13 headers).
#   - the base's CUDA forward-compat driver is deleted: it is older than the node drivers and, when
#     picked up, CUDA fails with error 803 (unsupported display driver / cuda driver combination).
#   - the base's InfiniBand verbs packages are purged before the installer runs, so the installer's
#     rdma-core (with the efa verbs provider) is what gets installed and loaded.
#
# Build arguments
#   MILES_IMAGE            upstream repository                              (default radixark/miles)
#   MILES_DIGEST           sha256 digest of the miles image to build on: REQUIRED. Left unset, the
#                          build stops at FROM, quoting the placeholder below. Resolve a tag with
#                          `docker buildx imagetools inspect radixark/miles:<tag>` (or `crane digest`).
#   MILES_TAG              the tag that digest was read from, recorded only  (default empty)
#   EFA_INSTALLER_VERSION  AWS EFA installer release                        (default 1.48.0)
#   EFA_INSTALLER_SHA256   sha256 of the installer tarball: REQUIRED (`sha256sum` of the file you
#                          downloaded and checked against AWS's published signature); the build stops
#                          before extracting an unchecked download
#   RAY_VERSION            optional: the Ray you will put in rayCluster.rayVersion; when set the
#                          build fails unless the base's Ray is exactly that version
#   CHECK_PROFILE          miles model profile run through model_args_utils.py as the minimum-image
#                          check (default qwen3-4B, the chart's default profile; empty = only check
#                          that the file exists)
#   GPU_ARCHS              informational label: sm_90 (H100/H200: p5, p5e, p5en) and sm_100 (B200);
#                          the GPU code comes from the miles base, nothing is compiled here
#
# Example (the context is unused: nothing is copied in)
#   docker buildx build --platform linux/amd64 -f images/miles-efa.Dockerfile \
#     --build-arg MILES_DIGEST=sha256:<64 hex of radixark/miles:v0.1.0> --build-arg MILES_TAG=v0.1.0 \
#     --build-arg RAY_VERSION=<ray in that image> \
#     --build-arg EFA_INSTALLER_SHA256=<sha256 of aws-efa-installer-1.48.0.tar.gz> \
#     -t <registry>/miles-efa:v0.1.0-efa1.48.0 --push .
#
# Ray: upstream installs ray[default] unpinned, so each base has whatever Ray was current when it was
# built. The build writes it to /opt/miles-efa/build-info.env (RAY_VERSION=...); put that value in
# the chart's rayCluster.rayVersion (the verify hook compares it with the running cluster):
#   docker run --rm <image> cat /opt/miles-efa/build-info.env
#
# Runtime assumptions (not checked here): x86_64 nodes (the driver paths below are the x86_64 ones),
# the nvidia container toolkit injecting libcuda into /usr/lib64 or /usr/lib/x86_64-linux-gnu, and
# the pod's primary interface named eth0 (EKS VPC CNI).

ARG MILES_IMAGE=radixark/miles
# Not a digest on purpose: an unset MILES_DIGEST makes FROM fail with this text in the error.
ARG MILES_DIGEST=MILES_DIGEST-is-required.pass--build-arg-MILES_DIGEST=sha256-digest-of-the-miles-image
FROM ${MILES_IMAGE}@${MILES_DIGEST}

ARG MILES_IMAGE
ARG MILES_DIGEST
ARG MILES_TAG=""
ARG EFA_INSTALLER_VERSION=1.48.0
ARG EFA_INSTALLER_SHA256=""
ARG RAY_VERSION=""
ARG CHECK_PROFILE=qwen3-4B
ARG GPU_ARCHS="sm_90 sm_100"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# 1. Minimum base, then the CUDA compat driver.
#    - model_args_utils.py must exist, and `python3 model_args_utils.py <profile>` must print args
#      (that is the exact call the chart makes). An older base stops the build here, before the
#      long EFA install.
#    - /usr/local/cuda*/compat is deleted rather than only kept off LD_LIBRARY_PATH, so no later
#      env change can bring the stale libcuda back; libcuda comes from the node's driver instead.
#    - the node driver's directories are registered with the loader cache as a fallback (the
#      toolkit refreshes the cache when the container starts); they are also on LD_LIBRARY_PATH
#      below because some loaders (SGLang's server subprocess, Triton) only search that.
RUN set -eu; \
    mau=/root/miles/miles/utils/external_utils/model_args_utils.py; \
    if [ ! -f "${mau}" ]; then \
      echo "ERROR: ${MILES_IMAGE}@${MILES_DIGEST} has no ${mau}." >&2; \
      echo "The chart runs 'python3 ${mau} <profile>'; that file arrived with miles commit fe30593" >&2; \
      echo "(2026-08-09). Use radixark/miles:v0.1.0 or later, or a dev build made after that commit." >&2; \
      exit 1; \
    fi; \
    if [ -n "${CHECK_PROFILE}" ]; then \
      args="$(python3 "${mau}" "${CHECK_PROFILE}")"; \
      if [ -z "${args}" ]; then echo "ERROR: ${mau} ${CHECK_PROFILE} printed nothing" >&2; exit 1; fi; \
      echo "model_args_utils.py ${CHECK_PROFILE}: ${args}"; \
    fi; \
    rm -rf /usr/local/cuda/compat /usr/local/cuda-*/compat; \
    printf '%s\n' /usr/lib64 /usr/lib/x86_64-linux-gnu > /etc/ld.so.conf.d/zz-host-driver.conf; \
    ldconfig; \
    if ldconfig -p | grep -E 'libcuda\.so.*=> /usr/local/cuda'; then \
      echo "ERROR: a libcuda under /usr/local/cuda is still in the loader cache" >&2; exit 1; \
    fi

# 2. EFA userspace.
#    - purge the base's verbs packages first (ibverbs-utils, libibverbs-dev, libibverbs1, libmlx5-1,
#      whichever are installed; apt also takes out what depends on them). The installer skips a
#      package when an equal or newer version is already installed, which could leave the base's
#      rdma-core without the efa provider in place.
#    - installer flags: -y unattended; -g GPUDirect RDMA (already the default); --skip-kmod no
#      kernel module in a container (the node has it); --skip-limit-conf no /etc/security limits
#      (the pod's limits come from the chart); --no-verify no device test (no EFA device at build
#      time). Without --skip-plugin the installer also installs its aws-ofi-nccl build; that is the
#      plugin this image uses. Debug packages (-d) are left out.
#    - the plugin's directory differs by distro and release (/opt/amazon/ofi-nccl/lib or its
#      x86_64-linux-gnu subdirectory on Debian-style systems), so it is looked up after the install,
#      the build fails if it is missing, and the directory found is added to the loader cache.
WORKDIR /tmp/aws-efa-installer
RUN set -eu; \
    export DEBIAN_FRONTEND=noninteractive; \
    apt-get update; \
    purge=(); \
    for p in ibverbs-utils libibverbs-dev libibverbs1 libmlx5-1; do \
      if dpkg -s "${p}" >/dev/null 2>&1; then purge+=("${p}"); fi; \
    done; \
    if ((${#purge[@]})); then \
      echo "purging from the base: ${purge[*]}"; \
      apt-get purge -y --allow-change-held-packages "${purge[@]}"; \
    fi; \
    curl -fsSLo /tmp/aws-efa-installer.tar.gz \
      "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz"; \
    if [ -z "${EFA_INSTALLER_SHA256}" ]; then \
      echo "ERROR: EFA_INSTALLER_SHA256 is required: pass --build-arg EFA_INSTALLER_SHA256=<sha256 of aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz>" >&2; \
      exit 1; \
    fi; \
    echo "${EFA_INSTALLER_SHA256}  /tmp/aws-efa-installer.tar.gz" | sha256sum -c -; \
    tar -xzf /tmp/aws-efa-installer.tar.gz -C /tmp; \
    ./efa_installer.sh -y -g --skip-kmod --skip-limit-conf --no-verify; \
    plugin="$(find /opt/amazon -name 'libnccl-net*.so' -print -quit)"; \
    if [ -z "${plugin}" ]; then \
      echo "ERROR: EFA installer ${EFA_INSTALLER_VERSION} left no aws-ofi-nccl plugin under /opt/amazon" >&2; \
      exit 1; \
    fi; \
    dirname "${plugin}" > /etc/ld.so.conf.d/zz-aws-ofi-nccl.conf; \
    ldconfig; \
    /opt/amazon/efa/bin/fi_info --version; \
    rm -rf /tmp/aws-efa-installer /tmp/aws-efa-installer.tar.gz /var/lib/apt/lists/*

# 3. Runtime environment. Library search order: EFA's libfabric and the OFI NCCL plugin first, the
#    base's own paths next, the node driver's directories last (appended, so they only supply what
#    nothing earlier provides, i.e. libcuda). Directories that do not exist are ignored by the loader.
ENV LD_LIBRARY_PATH=/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu:/opt/amazon/ofi-nccl/lib:/opt/amazon/aws-ofi-nccl/lib:${LD_LIBRARY_PATH}:/usr/lib64:/usr/lib/x86_64-linux-gnu \
    PATH=/opt/amazon/efa/bin:${PATH} \
    FI_PROVIDER=efa \
    FI_EFA_USE_DEVICE_RDMA=1 \
    FI_EFA_FORK_SAFE=1 \
    RDMAV_FORK_SAFE=1 \
    NCCL_PROTO=Simple \
    GLOO_SOCKET_IFNAME=eth0

# 4. Record what the image holds: the chart's rayCluster.rayVersion must equal RAY_VERSION here.
#    Also fails when the base had no LD_LIBRARY_PATH (an empty entry would make the loader search the
#    working directory) and when RAY_VERSION was given and differs from the image's Ray.
RUN set -eu; \
    case ":${LD_LIBRARY_PATH}:" in \
      *::*) echo "ERROR: LD_LIBRARY_PATH has an empty entry: ${LD_LIBRARY_PATH}" >&2; exit 1 ;; \
    esac; \
    ray_version="$(python3 -c 'import ray; print(ray.__version__)')"; \
    if [ -n "${RAY_VERSION}" ] && [ "${RAY_VERSION}" != "${ray_version}" ]; then \
      echo "ERROR: the base has Ray ${ray_version}, RAY_VERSION=${RAY_VERSION} was expected" >&2; \
      exit 1; \
    fi; \
    miles_commit="$(git -C /root/miles rev-parse HEAD 2>/dev/null || echo unknown)"; \
    plugin="$(find /opt/amazon -name 'libnccl-net*.so' -print -quit)"; \
    libfabric="$(fi_info --version | tr '\n' ' ')"; \
    mkdir -p /opt/miles-efa; \
    { \
      echo "MILES_BASE=${MILES_IMAGE}@${MILES_DIGEST}"; \
      echo "MILES_TAG=${MILES_TAG}"; \
      echo "MILES_COMMIT=${miles_commit}"; \
      echo "RAY_VERSION=${ray_version}"; \
      echo "EFA_INSTALLER_VERSION=${EFA_INSTALLER_VERSION}"; \
      echo "EFA_PACKAGES_FILE=/opt/amazon/efa_installed_packages"; \
      echo "NCCL_OFI_PLUGIN=${plugin}"; \
      echo "LIBFABRIC=\"${libfabric% }\""; \
    } > /opt/miles-efa/build-info.env; \
    cat /opt/miles-efa/build-info.env

LABEL org.opencontainers.image.title="miles-efa" \
      org.opencontainers.image.description="miles (SGLang + Megatron-LM RL post-training) with the AWS EFA installer and its bundled aws-ofi-nccl" \
      org.opencontainers.image.base.name="${MILES_IMAGE}" \
      org.opencontainers.image.base.digest="${MILES_DIGEST}" \
      io.miles.base-tag="${MILES_TAG}" \
      io.miles.efa-installer-version="${EFA_INSTALLER_VERSION}" \
      io.miles.ray-version-checked="${RAY_VERSION}" \
      io.miles.build-info="/opt/miles-efa/build-info.env" \
      io.miles.gpu-archs="${GPU_ARCHS}"

WORKDIR /root/miles
