"""Numerics with no Dask, no zarr and no study concepts: parameters, kinematics,
lineshapes, resolution functions, the 1-D and Dalitz likelihood models, the extended
unbinned NLL and the fitter, the unitarised profile, profile-likelihood scans."""
