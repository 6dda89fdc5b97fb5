"""What the generated workflows and the steps they run agree on (pure).

The names of files, jobs, outputs and artifacts (`layout`), each BuildJob as a GitHub
Actions matrix entry (`entries`), the cache keys of a build job (`cachekeys`), which entries
each workflow runs per family (`shapes`), runner labels (`labels`) and the pinned actions
and requirements (`pins`).
"""
