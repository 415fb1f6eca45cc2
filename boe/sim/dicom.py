"""Write a synthetic scan as DICOM with Modality, BodyPartExamined and ViewPosition tags."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from boe.sim.scans import ScanFacts

__all__ = ["DICOM_BODY_PART", "DICOM_MODALITY", "write_dicom"]

DICOM_MODALITY = {"ct": "CT", "mr": "MR", "xr": "DX", "us": "US"}
DICOM_BODY_PART = {
    "head": "HEAD",
    "chest": "CHEST",
    "abdomen": "ABDOMEN",
    "pelvis": "PELVIS",
    "spine": "SPINE",
    "limb": "EXTREMITY",
}
_VIEW_POSITION = {"pa": "PA", "ap": "AP", "lateral": "LL"}
_ORIENTATION = {
    "axial": [1, 0, 0, 0, 1, 0],
    "coronal": [1, 0, 0, 0, 0, -1],
    "sagittal": [0, 1, 0, 0, 0, -1],
}


def write_dicom(path: str | Path, pixels: np.ndarray, facts: ScanFacts, uid_seed: int) -> None:
    """Save `pixels` (uint8 grayscale) with the scan's metadata tags."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import UID, ExplicitVRLittleEndian, generate_uid

    sop_class = {
        "CT": "1.2.840.10008.5.1.4.1.1.2",
        "MR": "1.2.840.10008.5.1.4.1.1.4",
        "DX": "1.2.840.10008.5.1.4.1.1.1.1",
        "US": "1.2.840.10008.5.1.4.1.1.6.1",
    }[DICOM_MODALITY[facts.modality]]
    entropy = [str(uid_seed), str(facts.seed)]
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = UID(sop_class)
    meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=[*entropy, "sop"])
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = sop_class
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID = generate_uid(entropy_srcs=[*entropy, "study"])
    ds.SeriesInstanceUID = generate_uid(entropy_srcs=[*entropy, "series"])
    ds.PatientID = f"SIM{facts.seed % 100000:05d}"
    ds.PatientName = "Simulated^Patient"
    ds.StudyDescription = "boe simulator synthetic scan"
    ds.Modality = DICOM_MODALITY[facts.modality]
    ds.BodyPartExamined = DICOM_BODY_PART[facts.region]
    ds.ViewPosition = _VIEW_POSITION.get(facts.plane, "")
    if facts.plane in _ORIENTATION and facts.modality in ("ct", "mr"):
        ds.ImageOrientationPatient = _ORIENTATION[facts.plane]
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = (int(x) for x in pixels.shape)
    ds.BitsAllocated = 8
    ds.BitsStored = 8
    ds.HighBit = 7
    ds.PixelRepresentation = 0
    ds.PixelData = np.ascontiguousarray(pixels, np.uint8).tobytes()
    ds.save_as(str(path), enforce_file_format=True)
