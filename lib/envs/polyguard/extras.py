"""PolyGuard's optional corpus extra `drug_labels`: the drug-interaction section of each drug's openFDA label,
fetched once and cached on disk (`corpus.extras: [drug_labels]`). Offline, it is skipped and says so."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from ...io import atomic_write_text
from .kb import default_kb

OPENFDA_LABEL_URL = "https://api.fda.gov/drug/label.json?search=openfda.generic_name:{drug}&limit=1"


def drug_labels(config, drugs: list[str] | None = None, url: str = OPENFDA_LABEL_URL) -> tuple[list[dict], str]:
    drugs = sorted(default_kb().drugs) if drugs is None else drugs
    cache = Path(config.corpus.extras_cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    texts = []
    for drug in drugs:
        cached = cache / f"{drug}.json"
        if not cached.exists():
            try:
                with urllib.request.urlopen(url.format(drug=drug), timeout=5) as response:
                    atomic_write_text(cached, response.read().decode("utf-8"))
            except Exception as error:
                return [], f"skipped: drug-label API unreachable ({type(error).__name__}: {str(error)[:120]})"
        label = json.loads(cached.read_text()).get("results", [{}])[0]
        texts += label.get("drug_interactions", [])[:1]
    return [{"text": t} for t in texts], f"used: {len(texts)} label sections for {len(drugs)} drugs"
