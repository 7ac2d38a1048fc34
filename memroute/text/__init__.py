"""Text normalization shared by every keyword path: BM25, Milvus full-text, the journal's
read-your-writes match. It sits at the bottom so storage and retrieval can both use it."""
