"""Tests of dpbook.data.

The real torchvision loaders are exercised on small files that the tests write in torchvision's on-disk formats
(no dataset can be downloaded here):

- MNIST / FashionMNIST: raw idx-ubyte files in ``<root>/<Name>/raw``. torchvision only checks that they exist,
  so its own parser runs untouched.
- CIFAR10 / SVHN: torchvision verifies the md5 of every file against the published archives, which files written
  here can never match. The tests therefore replace only the *expected checksums* (the class attributes
  ``CIFAR10.train_list``/``test_list``/``meta`` and ``SVHN.split_list``) by the md5 of the written files, with
  pytest's ``monkeypatch`` (undone after each test). torchvision's integrity check still runs and still hashes
  the files, and its parsing code runs untouched; a separate test shows that without the patch the same files are
  rejected.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import struct
from urllib.error import URLError

import numpy as np
import pytest
import scipy.io
import torch
import torchvision

from dpbook.data import (
    DATASETS,
    NORMALIZATION,
    DatasetNotFoundError,
    load_dataset,
    load_digits,
    load_tensors,
    synthetic_classification,
)

N_TRAIN, N_TEST = 5, 3


def _md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _expected(name: str, images: np.ndarray, normalize: bool = True) -> torch.Tensor:
    """uint8 (n, C, H, W) -> what the loaders must return."""
    x = torch.from_numpy(images).float() / 255
    if not normalize:
        return x
    mean, std = (torch.tensor(v).view(1, -1, 1, 1) for v in NORMALIZATION[name])
    return (x - mean) / std


# --- writers of torchvision's file formats -------------------------------------------------------------------


def _write_idx(path, array: np.ndarray) -> None:
    """The idx format (LeCun): 0, 0, type 0x08 (uint8), ndim; then each dim as big-endian int32; then the bytes."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def _write_mnist(root, folder: str, rng) -> dict:
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    arrays = {}
    for prefix, n in (("train", N_TRAIN), ("t10k", N_TEST)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
        arrays[prefix] = (images[:, None], labels)
    return arrays


def _write_cifar10(root, rng) -> dict:
    """Pickled dicts {'data': uint8 (n, 3072) in CHW order, 'labels': list} as in cifar-10-python.tar.gz."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    arrays = {}
    for name, n in [(f"data_batch_{i}", N_TRAIN) for i in range(1, 6)] + [("test_batch", N_TEST)]:
        data = rng.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n).tolist()
        (folder / name).write_bytes(pickle.dumps({"data": data, "labels": labels}))
        arrays[name] = (data.reshape(n, 3, 32, 32), np.array(labels))
    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": classes}))
    return arrays


def _accept_cifar10_files(root, monkeypatch) -> None:
    """Replace torchvision's published CIFAR10 md5 sums by those of the files written here (see module doc)."""
    folder = root / "cifar-10-batches-py"
    cls = torchvision.datasets.CIFAR10
    monkeypatch.setattr(cls, "train_list", [[f, _md5(folder / f)] for f, _ in cls.train_list])
    monkeypatch.setattr(cls, "test_list", [[f, _md5(folder / f)] for f, _ in cls.test_list])
    monkeypatch.setattr(cls, "meta", {**cls.meta, "md5": _md5(folder / "batches.meta")})


def _write_svhn(root, rng) -> dict:
    """``.mat`` files with X uint8 (32, 32, 3, n) and y (n, 1) in 1..10, where 10 stands for the digit 0."""
    folder = root / "SVHN"
    folder.mkdir(parents=True)
    arrays = {}
    for split, n in (("train", N_TRAIN), ("test", N_TEST)):
        x = rng.integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8)
        y = np.array([10, 1, 2, 9, 10][:n], dtype=np.uint8).reshape(n, 1)
        scipy.io.savemat(folder / f"{split}_32x32.mat", {"X": x, "y": y})
        arrays[split] = (x.transpose(3, 2, 0, 1), np.where(y[:, 0] == 10, 0, y[:, 0]))
    return arrays


def _accept_svhn_files(root, monkeypatch) -> None:
    """Replace torchvision's published SVHN md5 sums by those of the files written here (see module doc)."""
    for split in ("train", "test"):
        url, filename, _ = torchvision.datasets.SVHN.split_list[split]
        md5 = _md5(root / "SVHN" / filename)
        monkeypatch.setitem(torchvision.datasets.SVHN.split_list, split, [url, filename, md5])


# --- real torchvision loaders on written files ----------------------------------------------------------------


@pytest.mark.parametrize(("name", "folder"), [("mnist", "MNIST"), ("fashionmnist", "FashionMNIST")])
def test_mnist_like_round_trip(tmp_path, name, folder):
    arrays = _write_mnist(tmp_path, folder, np.random.default_rng(0))
    x_train, y_train, x_test, y_test = load_tensors(name, root=tmp_path)
    assert x_train.shape == (N_TRAIN, 1, 28, 28) and x_test.shape == (N_TEST, 1, 28, 28)
    assert x_train.dtype == torch.float32 and y_train.dtype == torch.int64
    torch.testing.assert_close(x_train, _expected(name, arrays["train"][0]))
    torch.testing.assert_close(x_test, _expected(name, arrays["t10k"][0]))
    assert y_train.tolist() == arrays["train"][1].tolist() and y_test.tolist() == arrays["t10k"][1].tolist()


def test_cifar10_round_trip(tmp_path, monkeypatch):
    arrays = _write_cifar10(tmp_path, np.random.default_rng(1))
    _accept_cifar10_files(tmp_path, monkeypatch)
    x_train, y_train, x_test, y_test = load_tensors("CIFAR10", root=tmp_path)
    train_images = np.concatenate([arrays[f"data_batch_{i}"][0] for i in range(1, 6)])
    train_labels = np.concatenate([arrays[f"data_batch_{i}"][1] for i in range(1, 6)])
    assert x_train.shape == (5 * N_TRAIN, 3, 32, 32) and x_test.shape == (N_TEST, 3, 32, 32)
    torch.testing.assert_close(x_train, _expected("cifar10", train_images))
    torch.testing.assert_close(x_test, _expected("cifar10", arrays["test_batch"][0]))
    assert y_train.tolist() == train_labels.tolist() and y_test.tolist() == arrays["test_batch"][1].tolist()
    assert y_train.dtype == torch.int64


def test_svhn_round_trip_maps_label_10_to_0(tmp_path, monkeypatch):
    arrays = _write_svhn(tmp_path, np.random.default_rng(2))
    _accept_svhn_files(tmp_path, monkeypatch)
    x_train, y_train, x_test, y_test = load_tensors("svhn", root=tmp_path, normalize=False)
    assert x_train.shape == (N_TRAIN, 3, 32, 32) and x_test.shape == (N_TEST, 3, 32, 32)
    torch.testing.assert_close(x_train, _expected("svhn", arrays["train"][0], normalize=False))
    torch.testing.assert_close(x_test, _expected("svhn", arrays["test"][0], normalize=False))
    assert y_train.tolist() == [0, 1, 2, 9, 0] and y_test.tolist() == [0, 1, 2]


def test_checksums_are_really_checked(tmp_path):
    """Without replacing the published md5 sums, the written CIFAR10 and SVHN files are rejected as corrupted."""
    _write_cifar10(tmp_path, np.random.default_rng(3))
    _write_svhn(tmp_path, np.random.default_rng(3))
    for name in ("cifar10", "svhn"):
        with pytest.raises(DatasetNotFoundError, match="corrupted"):
            load_tensors(name, root=tmp_path)


def test_load_dataset_items_equal_load_tensors(tmp_path, monkeypatch):
    """The transform path (PIL -> ToTensor -> Normalize) and the in-memory path agree."""
    _write_mnist(tmp_path, "MNIST", np.random.default_rng(4))
    _write_cifar10(tmp_path, np.random.default_rng(4))
    _accept_cifar10_files(tmp_path, monkeypatch)
    for name in ("mnist", "cifar10"):
        x_train, y_train, x_test, y_test = load_tensors(name, root=tmp_path)
        test_set = load_dataset(name, root=tmp_path, train=False)
        assert len(test_set) == N_TEST
        for i in range(N_TEST):
            image, label = test_set[i]
            torch.testing.assert_close(image, x_test[i], atol=1e-6, rtol=0)
            assert label == y_test[i].item()


# --- errors ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("mnist", "MNIST/raw"),
        ("fashionmnist", "FashionMNIST/raw"),
        ("cifar10", "cifar-10-batches-py"),
        ("svhn", "SVHN"),
    ],
)
def test_missing_dataset_error_names_dataset_root_and_fix(tmp_path, name, where):
    root = tmp_path / "nowhere"
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset(name, root=root)
    err = info.value
    message = str(err)
    assert isinstance(err, FileNotFoundError)
    assert err.dataset.lower() == name and err.root == str(root)
    assert err.dataset in message and str(root) in message
    assert "download=True" in message and "Colab" in message
    assert os.path.abspath(root / where) in message
    assert isinstance(err.__cause__, RuntimeError)  # torchvision's own "Dataset not found ..." error


@pytest.mark.parametrize(("name", "module"), [("mnist", "mnist"), ("cifar10", "cifar")])
def test_failed_download_is_reported(tmp_path, monkeypatch, name, module):
    """No network here: the download function torchvision calls is replaced by one that fails like a DNS error."""

    def offline(*args, **kwargs):
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(f"torchvision.datasets.{module}.download_and_extract_archive", offline)
    with pytest.raises(DatasetNotFoundError, match="could not be downloaded") as info:
        load_dataset(name, root=tmp_path, download=True)
    assert "name resolution" in str(info.value)


def test_names_are_case_insensitive_and_unknown_names_list_valid_ones(tmp_path):
    _write_mnist(tmp_path, "FashionMNIST", np.random.default_rng(5))
    assert len(load_dataset("Fashion-MNIST", root=tmp_path)) == N_TRAIN
    with pytest.raises(ValueError, match="valid names: mnist, fashionmnist, cifar10, svhn"):
        load_tensors("imagenet", root=tmp_path)
    assert DATASETS == ("mnist", "fashionmnist", "cifar10", "svhn")


# --- offline datasets ------------------------------------------------------------------------------------------


GOLDEN_DIGITS_TEST_LABELS = [7, 6, 3, 7, 7, 3, 2, 8, 9, 3, 2, 6]  # the first test labels of the default split


def test_digits_split_is_fixed_stratified_and_scaled():
    first, second = load_digits(), load_digits()
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    x_train, y_train, x_test, y_test = first
    assert x_train.shape == (1437, 1, 8, 8) and x_test.shape == (360, 1, 8, 8)
    assert x_train.dtype == torch.float32 and y_train.dtype == torch.int64
    assert 0 <= x_train.min() and x_train.max() <= 1 and x_train.max() == 1
    # stratified: every class has its share of the 1,797 digits in the test set, to within one example
    all_counts = torch.bincount(torch.cat([y_train, y_test]), minlength=10)
    assert all_counts.sum() == 1797
    assert ((torch.bincount(y_test, minlength=10) - all_counts * 360 / 1797).abs() <= 1).all()
    # golden fingerprint of the documented split (seed=0): changes here break comparability of recorded results
    assert y_test[:12].tolist() == GOLDEN_DIGITS_TEST_LABELS


def test_digits_options():
    x_train, _, x_test, _ = load_digits(standardize=True)
    assert abs(x_train.mean().item()) < 1e-5 and abs(x_train.std().item() - 1) < 1e-5
    assert abs(x_test.mean().item()) < 0.1
    assert not torch.equal(load_digits(seed=1).y_test, load_digits().y_test)
    assert len(load_digits(test_size=0.5).y_test) == 899


def test_synthetic_is_deterministic_and_learnable():
    a, b = synthetic_classification(seed=3), synthetic_classification(seed=3)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a.x_train, synthetic_classification(seed=4).x_train)
    assert a.x_train.shape == (1000, 1, 8, 8) and a.y_test.shape == (200,)
    assert a.x_train.dtype == torch.float32 and a.y_train.dtype == torch.int64
    assert set(a.y_train.tolist()) == set(range(10))
    vectors = synthetic_classification(n_train=40, n_test=10, shape=5, num_classes=3, seed=0)
    assert vectors.x_train.shape == (40, 5) and vectors.y_train.max() < 3
    # nearest class mean (estimated on the training set) beats chance by far: the task is learnable
    x_train, y_train, x_test, y_test = (t.flatten(1) if t.dim() > 1 else t for t in a)
    means = torch.stack([x_train[y_train == k].mean(0) for k in range(10)])
    accuracy = (torch.cdist(x_test, means).argmin(1) == y_test).float().mean().item()
    assert accuracy > 0.5
