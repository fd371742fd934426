"""Test sets: generated questions (an LLM with quality gates), FAQ import (FAQ / ticket logs), annotation sheets
(people grade pooled candidates), and a spot check by people (export / import a review).

Each of them writes a BEIR-layout folder that :func:`lab.data.beir.load_dataset` reads unchanged, plus a
``provenance.json`` saying what made it (see :mod:`lab.testset.io`). The ``lab testset`` command wraps them.
"""
