# syntax=docker/dockerfile:1
#
# miles runtime with the AWS EFA stack, for charts/miles on p5/p5e/p5en (and any EFA instance).
#
# The base is the upstream miles image pinned BY DIGEST (its :latest/:dev tags roll). On top of it,
# only the EFA stack: the AWS EFA installer (libfabric with the efa provider, rdma-core; no kernel
# module inside a container) and the aws-ofi-nccl plugin that lets NCCL use libfabric/EFA.
#
# Build arguments
#   MILES_IMAGE            upstream repository                       (default radixark/miles)
#   MILES_DIGEST           sha256 digest of the miles image to build on (REQUIRED; find it with
#                          `docker buildx imagetools inspect radixark/miles:<tag>`)
#   EFA_INSTALLER_VERSION  AWS EFA installer release                  (default 1.42.0)
#   EFA_INSTALLER_SHA256   optional sha256 of the installer tarball; checked when set
#   AWS_OFI_NCCL_VERSION   aws-ofi-nccl release built against the image's CUDA (default 1.15.0)
#   CUDA_HOME              CUDA toolkit inside the base image        (default /usr/local/cuda)
#   GPU_ARCHS              informational: the GPU architectures this image is meant for. The
#                          CUDA code comes from the miles base (PyTorch, SGLang, Megatron kernels):
#                          sm_90 (H100/H200: p5, p5e, p5en) and sm_100 (B200: p6-b200) with CUDA 13.
#                          aws-ofi-nccl has no GPU kernels, so nothing here is compiled per arch.
#
# Example
#   docker build -f images/miles-efa.Dockerfile \
#     --build-arg MILES_DIGEST=sha256:<64 hex> -t <registry>/miles-efa:<miles tag>-efa1.42.0 .
#
# Ray version: this layer does not touch Ray. The RayCluster's rayVersion (chart value
# rayCluster.rayVersion) must equal the Ray inside the base image, which upstream installs unpinned:
# read it with `docker run --rm <image> python3 -c "import ray; print(ray.__version__)"` after each
# base bump (the image label below records it at build time), and the chart's verify hook compares
# the running cluster's version with the chart's.

ARG MILES_IMAGE=radixark/miles
ARG MILES_DIGEST=sha256:0000000000000000000000000000000000000000000000000000000000000000
FROM ${MILES_IMAGE}@${MILES_DIGEST}

ARG EFA_INSTALLER_VERSION=1.42.0
ARG EFA_INSTALLER_SHA256=""
ARG AWS_OFI_NCCL_VERSION=1.15.0
ARG CUDA_HOME=/usr/local/cuda
ARG GPU_ARCHS="sm_90 sm_100"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# EFA userspace only: --skip-kmod (no kernel module in a container), -g (GPUDirect RDMA support),
# --skip-limit-conf (the pod's limits come from the chart), --no-verify (no GPG key download at build
# time; verify the tarball with EFA_INSTALLER_SHA256 instead).
WORKDIR /tmp/efa
RUN curl -fsSLo efa.tar.gz "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" \
    && if [ -n "${EFA_INSTALLER_SHA256}" ]; then echo "${EFA_INSTALLER_SHA256}  efa.tar.gz" | sha256sum -c -; fi \
    && tar -xzf efa.tar.gz --strip-components=1 \
    && ./efa_installer.sh -y -g --skip-kmod --skip-limit-conf --no-verify \
    && rm -rf /tmp/efa /var/lib/apt/lists/*

# aws-ofi-nccl, built against the base image's CUDA and the installer's libfabric.
WORKDIR /tmp/ofi
RUN curl -fsSLo ofi.tar.gz "https://github.com/aws/aws-ofi-nccl/releases/download/v${AWS_OFI_NCCL_VERSION}/aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}.tar.gz" \
    && tar -xzf ofi.tar.gz --strip-components=1 \
    && ./configure --prefix=/opt/aws-ofi-nccl --with-libfabric=/opt/amazon/efa --with-cuda="${CUDA_HOME}" --disable-tests \
    && make -j"$(nproc)" \
    && make install \
    && rm -rf /tmp/ofi

WORKDIR /root/miles

ENV LD_LIBRARY_PATH=/opt/aws-ofi-nccl/lib:/opt/amazon/efa/lib:${LD_LIBRARY_PATH} \
    PATH=/opt/amazon/efa/bin:${PATH} \
    FI_PROVIDER=efa \
    FI_EFA_USE_DEVICE_RDMA=1 \
    NCCL_PROTO=Simple

LABEL org.opencontainers.image.title="miles-efa" \
      org.opencontainers.image.description="miles (SGLang + Megatron-LM RL post-training) with the AWS EFA installer and aws-ofi-nccl" \
      io.miles.efa-installer-version="${EFA_INSTALLER_VERSION}" \
      io.miles.aws-ofi-nccl-version="${AWS_OFI_NCCL_VERSION}" \
      io.miles.gpu-archs="${GPU_ARCHS}"
