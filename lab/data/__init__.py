"""Data layer: typed values and readers for BEIR, TREC and evidence spans."""
from lab.data.beir import LoadReport, load_dataset, load_dataset_report, qrels_files, read_corpus, read_queries
from lab.data.evidence import SpanReport, cmrc_answer_spans, read_evidence
from lab.data.fingerprint import dataset_files, fingerprint, fingerprint_texts
from lab.data.io import DataWarning
from lab.data.trec import read_qrels, read_trec_run, write_trec_qrels, write_trec_run
from lab.data.types import Corpus, Dataset, Document, EvidenceSpan, Qrels, Queries, Run

__all__ = [
    "Corpus", "Dataset", "Document", "EvidenceSpan", "Qrels", "Queries", "Run",
    "DataWarning", "LoadReport", "SpanReport",
    "load_dataset", "load_dataset_report", "read_corpus", "read_queries", "qrels_files",
    "read_qrels", "read_trec_run", "write_trec_run", "write_trec_qrels",
    "read_evidence", "cmrc_answer_spans",
    "fingerprint", "fingerprint_texts", "dataset_files",
]
