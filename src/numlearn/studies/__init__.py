"""The studies whose runs are more than rows x seeds, one module each (``conf/study/<name>.yaml`` says which by its
``kind``): ``tuned`` -- every tuned configuration chosen on a selection split, then the rows on fresh seeds."""
