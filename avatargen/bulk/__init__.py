"""Bulk rendering: many jobs, any number of workers, on one machine, a shared file system, or a Ray cluster with
object storage. The whole bulk path, in the order a job meets it:

    jobs.py          the jobs file (JSONL/CSV, local or s3://), streamed row by row into ``Job``s
    workers.py       ``avatargen batch``: the file-lock workers (any scheduler; torchrun spread/shard)
    ray_driver.py    ``avatargen batch --ray``: a Ray driver handing jobs to long-lived worker actors...
    ray_worker.py    ... each of which keeps its model loaded from job to job
    runner.py        one job, for every engine: claim, render (resuming), record
    outdir.py        what an out-dir decides -- finished, claimed, failed, resumable -- as a folder
    local_dir.py       (``flock`` on a shared file system) or
    bucket_dir.py      a bucket prefix (conditional writes)
    remote_render.py a render with inputs and output in a bucket (download, scratch, upload)
    mirror.py        its resume state copied to the bucket at every checkpoint, restored on any machine
    s3.py            the object store (boto3); locations.py: paths and ``s3://`` URLs alike
    results.py       results, ``batch_report.json``, the summary; status.py: ``avatargen batch status``
"""
